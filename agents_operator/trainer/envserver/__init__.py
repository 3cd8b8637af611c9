"""Environments outside the trainer process: an environment server and its client, over gRPC.

`server` serves a batch of gymnasium environments (`agents-operator env-server`), checking every request
(`requests`); `protocol` is the wire format both sides share (the policy's fields of a message are
`envs.policy_message`'s). The client, `client.RemoteBatchEnv` (one `connection.Connection` per server), is a
drop-in for `envs.batch.BatchEnv` that steps the environments of one or more servers, per step or, in rollout
mode, a whole rollout at a time with the policy acting next to the environments (`envs.rollout`). See
docs/envserver.md.

Above `envs` (the server serves a `BatchEnv`; the client returns its `StepResult`s and `Rollout`s), below
`sampling`.

An env server listens on `contract.ENV_SERVER_PORT` unless told otherwise.
"""
