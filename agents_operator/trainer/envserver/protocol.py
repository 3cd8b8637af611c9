"""The environment server's wire format: gRPC calls whose messages are dicts of JSON values and arrays.

There is no protoc-generated code. Every method is a generic handler over bytes (unary, but for Render's
stream of replies), and a message is encoded as

    4-byte little-endian header length | UTF-8 JSON header | payload

where the header is the message with every numpy array replaced by `{"$a": [dtype, shape, offset]}`, the
array's raw C-order bytes lying at `offset` in the payload (8-byte aligned). Decoding accepts only bool,
integer and floating-point dtypes and builds arrays as views of the received bytes: no pickle, nothing
executable in the data.

Methods of the service `agents.EnvServer` (replies to Reset, Step and Collect carry the server's state
token `session`, see `server.EnvService`):

    Spec      {}                                  -> env_id, num_envs, observation_shape, action_shape,
                                                     action_low, action_high, render_fps
    Reset     {session}                           -> observations, session
    Step      {actions, session}                  -> the fields of `envs.types.StepResult`
    Collect   {weights, num_policy_layers, activation, observation_moments, clip_observations,
               normalize_observations, observations_per_step, noise, session}
                                                  -> the fields of `envs.rollout.Rollout`
              (`collect_message`: the policy's fields are `envs.policy_message`'s; held exploration
              weights add noise_steps and noise_hold, `envs.noise.Noise.to_message`)
    Evaluate  {the policy fields of Collect, episodes, seed}
                                                  -> returns, lengths
    Render    {the fields of Evaluate}            -> a stream: {frames} (uint8, at most half a message each)
                                                     ..., then {returns, lengths}

Evaluate and Render play `envs.episodes.run_episodes` on an environment of their own, apart from the batch: they
need no session and leave the batch's episodes as they are.

A request the server will not run (it does not decode, a field is missing, out of range or not finite, see
`requests`) is refused with gRPC INVALID_ARGUMENT and one line naming the field. A reply may instead be
`{"error": text, "stale": bool}`: `stale` when the request's session is not the server's current one (the
server restarted, or another client reset it) or a Reset would replace another client's live session;
otherwise the request failed, and `error` is one line (the traceback is in the server's log). Transport
failures, and a server busy with more calls than it admits (UNAVAILABLE), are gRPC status codes.

The server also answers the standard `grpc.health.v1.Health/Check`, so a Kubernetes `grpc:` probe needs
nothing else.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np

from agents_operator.trainer.envs.noise import Noise
from agents_operator.trainer.envs.policy_message import policy_message
from agents_operator.trainer.ppo.normalize import Normalizer
from agents_operator.trainer.ppo.policy import NumpyPolicy

SERVICE = "agents.EnvServer"
METHODS = ("Spec", "Reset", "Step", "Collect", "Evaluate")  # unary: one request, one reply
RENDER = "Render"  # one request, a stream of replies
HEALTH_SERVICE = "grpc.health.v1.Health"
HEALTH_METHOD = "Check"
# HealthCheckResponse{status: SERVING}: field 1 (tag 0x08, varint) = 1, as grpc/health/v1/health.proto encodes it.
HEALTH_SERVING = b"\x08\x01"

# The largest message either side sends or accepts, unless told otherwise. A rollout is one message (the cheetah
# preset's: 1.4 MB), rendered frames come in chunks of at most half of it (`CHUNK_FRACTION`). Encoding and
# decoding a message briefly costs about three times its size, so this also bounds what one call costs in memory.
MAX_MESSAGE_BYTES = 128 << 20
CHUNK_FRACTION = 2
_RECONNECT = (
    # Reconnect to a restarted server within a fraction of a second (gRPC's default backoff grows to 120 s).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


def _sizes(max_message_bytes: int) -> tuple[tuple[str, int], ...]:
    return (
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
    )


def channel_options(max_message_bytes: int = MAX_MESSAGE_BYTES) -> tuple[tuple[str, int], ...]:
    """A client channel's gRPC options: message sizes up to `max_message_bytes`, quick reconnects."""
    return (*_sizes(max_message_bytes), *_RECONNECT)


def server_options(max_message_bytes: int = MAX_MESSAGE_BYTES) -> tuple[tuple[str, int], ...]:
    """A server's gRPC options: message sizes up to `max_message_bytes`, its port its own."""
    # gRPC enables SO_REUSEPORT by default, which lets a second server bind a port that is in use.
    return (*_sizes(max_message_bytes), ("grpc.so_reuseport", 0))


_LENGTH = struct.Struct("<I")
_ALIGNMENT = 8
_ARRAY = "$a"
_ARRAY_KINDS = frozenset("biuf")  # bool, signed and unsigned integer, floating point


class ProtocolError(ValueError):
    """A message that does not decode."""


def method_path(method: str) -> str:
    return f"/{SERVICE}/{method}"


def encode(message: dict[str, Any]) -> bytes:
    """`message` (JSON values, numpy arrays and scalars, nested in dicts and lists) as bytes."""
    chunks: list[bytes] = []
    offset = 0

    def replace(value: Any) -> Any:
        nonlocal offset
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in _ARRAY_KINDS:
                raise TypeError(f"cannot send an array of dtype {value.dtype}")
            data = np.ascontiguousarray(value).tobytes()
            entry = {_ARRAY: [value.dtype.str, list(value.shape), offset]}
            padded = len(data) + -len(data) % _ALIGNMENT
            chunks.append(data.ljust(padded, b"\0"))
            offset += padded
            return entry
        if isinstance(value, dict):
            return {key: replace(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [replace(item) for item in value]
        if isinstance(value, np.generic):
            return value.item()
        return value

    header = json.dumps(replace(message), separators=(",", ":")).encode()
    return b"".join([_LENGTH.pack(len(header)), header, *chunks])


def decode(data: bytes) -> dict[str, Any]:
    """The message `encode` made; its arrays are read-only views of `data`."""
    view = memoryview(data)
    try:
        (length,) = _LENGTH.unpack_from(view)
        header = bytes(view[_LENGTH.size : _LENGTH.size + length])
        payload = view[_LENGTH.size + length :]

        def array(entry: dict[str, Any]) -> Any:
            if _ARRAY not in entry:
                return entry
            dtype_text, shape, offset = entry[_ARRAY]
            dtype = np.dtype(dtype_text)
            if dtype.kind not in _ARRAY_KINDS:
                raise ProtocolError(f"arrays of dtype {dtype} are not accepted")
            return np.frombuffer(payload, dtype, math.prod(shape), offset).reshape(shape)

        message = json.loads(header, object_hook=array)
    except (struct.error, TypeError, ValueError) as error:
        raise ProtocolError(f"undecodable message: {error}") from None
    if not isinstance(message, dict):
        raise ProtocolError("a message must be a JSON object")
    return message


def collect_message(policy: NumpyPolicy, observations: Normalizer, noise: Noise) -> dict[str, Any]:
    """A Collect request (without the session): the policy, the observation statistics and the noise."""
    return {**policy_message(policy, observations), **noise.to_message()}
