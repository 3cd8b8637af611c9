"""What an env server accepts: its limits, and each request's fields checked before an environment sees them.

A request that fails a check is refused (`Refused`, sent back as gRPC INVALID_ARGUMENT with one line naming the
field and the reason) before anything touches the environments, so the session it named stays as it was. Finite
actions outside the action bounds are not refused: the server clips them, as `BatchEnv` does; what cannot be
clipped (NaN, infinity, a wrong shape or dtype) is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents_operator.trainer.envs.noise import Noise
from agents_operator.trainer.envs.policy_message import parse_policy
from agents_operator.trainer.envserver import protocol
from agents_operator.trainer.ppo.normalize import Normalizer
from agents_operator.trainer.ppo.policy import NumpyPolicy

_NUMBER_KINDS = frozenset("fiu")


class Refused(ValueError):
    """A request the server will not run; the message is one line naming the field and the reason."""


@dataclass(frozen=True)
class Limits:
    """How much one call may ask of a server. Each bound keeps one client's mistake from holding the server
    (and its lock, which every other call waits for) longer or larger than the caller meant."""

    max_message_bytes: int = protocol.MAX_MESSAGE_BYTES
    """The largest message received or sent (gRPC refuses larger ones with RESOURCE_EXHAUSTED)."""
    max_episodes: int = 1000
    """Episodes one Evaluate or Render call may play."""
    max_rollout_steps: int = 100_000
    """Steps one Collect call may run (its noise's steps)."""
    max_render_bytes: int = 1 << 30
    """Frames one Render call may hold on the server before it has sent them."""
    session_lease_seconds: float = 30.0
    """How long a session must be idle before a Reset without its token may replace it (a restarted client)."""


def actions(message: dict[str, Any], num_envs: int, action_shape: tuple[int, ...]) -> np.ndarray:
    """The `actions` of a Step request: a finite number per environment and action dimension."""
    return _finite("actions", _array("actions", message.get("actions"), (num_envs, *action_shape)))


def noise(message: dict[str, Any], num_envs: int, policy: NumpyPolicy, limits: Limits) -> Noise:
    """The noise of a Collect request for `policy`: per step, `noise` (steps, num_envs, act_dim); or held
    exploration weights, `noise` (periods, num_envs, L, act_dim) of a state-dependent policy with `noise_steps`
    and `noise_hold` (`envs.noise`). 1 <= steps <= max_rollout_steps."""
    if "noise_hold" not in message:
        steps = len(_array("noise", message.get("noise"), (None, num_envs, policy.log_std.shape[-1])))
        hold = 1
    else:
        steps, hold = message.get("noise_steps"), message.get("noise_hold")
        if not policy.state_dependent:
            raise Refused("noise_hold: held exploration weights need a state-dependent policy (log_std (L, act_dim))")
        for name, value in (("noise_steps", steps), ("noise_hold", hold)):
            if not _integer(value) or value < 1:
                raise Refused(f"{name}: {value!r}, must be a positive integer")
        periods = -(-steps // hold)
        _array("noise", message.get("noise"), (periods, num_envs, *policy.log_std.shape))
    if not 1 <= steps <= limits.max_rollout_steps:
        raise Refused(f"noise: {steps} steps, must be 1 to {limits.max_rollout_steps} (max_rollout_steps)")
    return Noise(_finite("noise", message["noise"]), steps, hold)


def policy(
    message: dict[str, Any], observation_shape: tuple[int, ...], action_shape: tuple[int, ...]
) -> tuple[NumpyPolicy, Normalizer]:
    """The policy and observation statistics of a Collect, Evaluate or Render request: finite, and shaped for
    the served spaces (a mismatch would otherwise fail mid-rollout, inside the environments' processes)."""
    weights = message.get("weights")
    if not isinstance(weights, list) or not weights:
        raise Refused("weights: missing or not a list of arrays")
    for index, weight in enumerate(weights):
        _finite(f"weights[{index}]", _array(f"weights[{index}]", weight))
    moments = message.get("observation_moments")
    if not isinstance(moments, list) or len(moments) != 3:
        raise Refused("observation_moments: must be [count, sum, sum of squares]")
    shapes = {"count": (), "sum": observation_shape, "sumsq": observation_shape}
    for (name, shape), value in zip(shapes.items(), moments, strict=True):
        _finite(f"observation_moments.{name}", _array(f"observation_moments.{name}", np.asarray(value), shape))
    try:
        parsed, normalizer = parse_policy(message, observation_shape)
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise Refused(f"policy: {type(error).__name__}: {error}") from None
    inputs = math.prod(observation_shape)
    _layers("policy", parsed.policy, inputs, math.prod(action_shape))
    _layers("value", parsed.value, inputs, 1)
    state_dependent = (parsed.policy[-1][0].shape[0], *action_shape)  # gSDE's: (last hidden width, act_dim)
    _array("log_std", parsed.log_std, state_dependent if parsed.log_std.ndim == 2 else action_shape)
    return parsed, normalizer


def episodes(message: dict[str, Any], limits: Limits) -> tuple[int, int]:
    """`episodes` (1 to max_episodes) and `seed` (a non-negative integer) of an Evaluate or Render request."""
    count, seed = message.get("episodes"), message.get("seed")
    if not _integer(count) or not 1 <= count <= limits.max_episodes:
        raise Refused(f"episodes: {count!r}, must be an integer from 1 to {limits.max_episodes} (max_episodes)")
    if not _integer(seed) or seed < 0:
        raise Refused(f"seed: {seed!r}, must be a non-negative integer")
    return count, seed


def _layers(name: str, layers: list[tuple[np.ndarray, np.ndarray]], inputs: int, outputs: int) -> None:
    """Kernels and biases that chain from `inputs` to `outputs` units."""
    width = inputs
    for index, (kernel, bias) in enumerate(layers):
        if kernel.ndim != 2 or kernel.shape[0] != width or bias.shape != kernel.shape[1:]:
            raise Refused(
                f"weights: {name} layer {index} has a kernel of shape {kernel.shape} and a bias of shape "
                f"{bias.shape}; it must take {width} inputs"
            )
        width = kernel.shape[1]
    if width != outputs:
        raise Refused(f"weights: the {name} network has {width} outputs, expected {outputs}")


def _array(name: str, value: Any, shape: tuple[int | None, ...] | None = None) -> np.ndarray:
    """`value` as a numeric array of `shape` (None: any length on that axis; shape None: any shape)."""
    if not isinstance(value, np.ndarray) or value.dtype.kind not in _NUMBER_KINDS:
        raise Refused(f"{name}: must be an array of numbers, got {_describe(value)}")
    if shape is not None and (
        value.ndim != len(shape) or any(want not in (None, got) for want, got in zip(shape, value.shape, strict=True))
    ):
        wanted = tuple("any" if size is None else size for size in shape)
        raise Refused(f"{name}: shape {value.shape}, expected {wanted}")
    return value


def _finite(name: str, value: np.ndarray) -> np.ndarray:
    bad = ~np.isfinite(value)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise Refused(f"{name}{list(where) if where else ''} is {value[where]}: every value must be finite")
    return value


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of dtype {value.dtype}"
    return "nothing" if value is None else type(value).__name__
