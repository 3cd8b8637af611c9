"""Environments outside the trainer process: an environment server and its client, over gRPC.

`server` serves a batch of gymnasium environments (`agents-operator env-server`), checking every request
(`requests`); `protocol` is the wire format both sides share, the policy's fields of a message included. The
client, `envs.remote.RemoteBatchEnv`, is a drop-in for `envs.batch.BatchEnv` that steps the environments of
one or more servers, per step or, in rollout mode, a whole rollout at a time with the policy acting next to
the environments (`sampling.rollout`). See docs/envserver.md.

This package's own module imports nothing heavy, so the CLI can read `DEFAULT_PORT` cheaply.
"""

DEFAULT_PORT = 50051
"""The gRPC port an env server listens on unless told otherwise (the conventional gRPC port)."""
