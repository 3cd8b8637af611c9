"""Environments outside the trainer process: an environment server and its client, over gRPC.

`server` serves a batch of gymnasium environments (`agents-operator env-server`); `client.RemoteBatchEnv`
is a drop-in for `envs.BatchEnv` that steps the environments of one or more servers, per step or, in
rollout mode, a whole rollout at a time with the policy acting next to the environments
(`trainer.rollouts`); `protocol` is the wire format both sides share. See docs/envserver.md.

This package's own module imports nothing heavy, so the CLI can read `DEFAULT_PORT` cheaply.
"""

DEFAULT_PORT = 50051
"""The gRPC port an env server listens on unless told otherwise (the conventional gRPC port)."""
