"""What a `BatchEnv` and its worker processes say to each other over their pipe.

A message is a `Kind` and its arguments: the named tuple of that kind below (`Start`, `Attach`, `Collect`,
`Episode`), or () for the kinds that have none. The worker runs the handler its dispatch table holds for the
kind (`worker.dispatch`) and replies with the handler's result, or with a `Failure` when the handler raised;
a kind it has no handler for is an `UnknownKind` error, sent back as such a failure. `CLOSE` ends the
worker, unanswered. The step, sent for every step of every group, is pickled once (`STEP`).
"""

from __future__ import annotations

import enum
import pickle
from typing import Any, NamedTuple

import numpy as np

from agents_operator.trainer.envs.noise import Noise
from agents_operator.trainer.envs.shared import Layout


class Kind(enum.Enum):
    START = "start"  # make the environments: `Start` -> (observation space, action space)
    ATTACH = "attach"  # map the shared memory: `Attach` -> None
    RESET = "reset"  # reset every environment into the shared memory: () -> None
    STEP = "step"  # step every environment with the shared actions: () -> (episode returns, episode lengths)
    COLLECT = "collect"  # run a whole rollout: `Collect` -> `rollout.Rollout`
    EPISODE = "episode"  # play one evaluation episode: `Episode` -> (return, length)
    CLOSE = "close"  # exit: () -> no reply


class Start(NamedTuple):
    env_id: str
    max_episode_steps: int | None
    first_index: int  # the index in the batch of the process's first environment
    seed: int  # the batch's seed: environment j is seeded seed + j on its first reset
    count: int  # how many environments the process runs


class Attach(NamedTuple):
    layout: Layout
    start: int  # the process's rows of the shared arrays
    stop: int


class Collect(NamedTuple):
    policy: dict[str, Any]  # `policy_message.policy_message`
    noise: Noise  # the process's environments' rows
    first_acting: np.ndarray | None  # what the first step acts on (`rollout.run`)


class Episode(NamedTuple):
    policy: dict[str, Any]  # `policy_message.policy_message`
    seed: int


class Failure(NamedTuple):
    """The reply of a handler that raised: where (an environment, the evaluation environment) and how."""

    where: str
    traceback: str


class UnknownKind(ValueError):
    """A message of a kind the worker has no handler for."""

    def __init__(self, kind: object):
        super().__init__(f"a worker process has no handler for message kind {kind!r}")


def encode(kind: Kind, arguments: tuple[Any, ...] = ()) -> bytes:
    return pickle.dumps((kind, arguments))


STEP = encode(Kind.STEP)
CLOSE = encode(Kind.CLOSE)
