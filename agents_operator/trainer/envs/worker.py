"""The worker side of a `BatchEnv`: the main loop of one worker process and its environments.

A worker process is a fresh interpreter that runs `serve`: it makes its environments, steps them through the
shared memory on the parent's messages (`messages`; one handler per kind, `dispatch`), and runs whole
rollouts of them (`collect`) with the policy the parent sends. Apart from them, it plays evaluation episodes
of a policy the parent sends (`episode`) on an environment of its own, made on first use. It catches every
exception and sends its traceback back to be re-raised, ignores SIGINT (the parent shuts it down) and exits
when its pipe reaches end-of-file or its parent changes (checked while it waits and at every step of a
rollout it runs).
"""

from __future__ import annotations

import mmap
import os
import pickle
import signal
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import numpy as np

from agents_operator.trainer.envs.episodes import LocalEpisodes
from agents_operator.trainer.envs.make import make_env
from agents_operator.trainer.envs.messages import Failure, Kind, UnknownKind
from agents_operator.trainer.envs.noise import Noise
from agents_operator.trainer.envs.policy_message import parse_policy
from agents_operator.trainer.envs.rollout import Rollout, run
from agents_operator.trainer.envs.shared import POLL_SECONDS, Layout
from agents_operator.trainer.envs.types import StepResult


class _Worker:
    """The environments of one worker process and the commands the parent sends them."""

    def __init__(self, buffer_fd: int, parent: int) -> None:
        self._buffer_fd = buffer_fd
        self.parent = parent  # the pid of the process that started this one
        self._envs: list[gym.Env] = []
        self._seeds: list[int | None] = []
        self._first_index = 0
        self._current: int | None = 0  # the environment in use; None: the evaluation environment
        self.simulation_seconds = 0.0  # spent in `step`, all steps together

    def start(
        self, env_id: str, max_episode_steps: int | None, first_index: int, seed: int, count: int
    ) -> tuple[gym.Space, gym.Space]:
        self._first_index = first_index
        self._evaluation = LocalEpisodes(env_id, max_episode_steps)
        for index in range(count):
            self._current = index
            self._envs.append(make_env(env_id, max_episode_steps))
        self._seeds = [seed + first_index + index for index in range(count)]
        self._returns = [0.0] * count
        self._lengths = [0] * count
        return self._envs[0].observation_space, self._envs[0].action_space

    def attach(self, layout: Layout, start: int, stop: int) -> None:
        self._memory = mmap.mmap(self._buffer_fd, layout.nbytes)
        os.close(self._buffer_fd)
        self._shared = layout.arrays(self._memory).rows(start, stop)

    def reset(self) -> None:
        for index, env in enumerate(self._envs):
            self._current = index
            self._shared.observations[index] = env.reset(seed=self._seeds[index])[0]
            self._seeds[index] = None
            self._returns[index], self._lengths[index] = 0.0, 0
        self._shared.final_observations[:] = self._shared.observations

    def step(self) -> tuple[list[float], list[int]]:
        begin = time.perf_counter()
        shared, returns, lengths = self._shared, [], []
        for index, env in enumerate(self._envs):
            self._current = index
            observation, reward, terminated, truncated, _ = env.step(shared.actions[index].copy())
            self._returns[index] += float(reward)
            self._lengths[index] += 1
            shared.rewards[index] = reward
            shared.terminated[index] = terminated
            shared.truncated[index] = truncated
            shared.final_observations[index] = observation
            if terminated or truncated:
                returns.append(self._returns[index])
                lengths.append(self._lengths[index])
                self._returns[index], self._lengths[index] = 0.0, 0
                observation = env.reset()[0]
            shared.observations[index] = observation
        self.simulation_seconds += time.perf_counter() - begin
        return returns, lengths

    def collect(self, policy: dict[str, Any], noise: Noise, first_acting: np.ndarray | None) -> Rollout:
        """A rollout of this process's environments from where they are, acting with the message's policy."""
        acting, normalizer = parse_policy(policy, self._shared.observations.shape[1:])
        observations = self._shared.observations.copy()
        before = self.simulation_seconds
        rollout = run(_OwnEnvs(self), observations, acting, normalizer, noise, first_acting)
        rollout.simulation_seconds = np.array([self.simulation_seconds - before])
        return rollout

    def episode(self, policy: dict[str, Any], seed: int) -> tuple[float, int]:
        """The return and length of one evaluation episode (`episodes.run_episodes`, seeded `seed`) of the
        message's policy, on this process's evaluation environment: the batch's episodes go on undisturbed."""
        self._current = None
        acting, normalizer = parse_policy(policy, self._shared.observations.shape[1:])
        (total,), (length,) = self._evaluation.run_episodes(acting, normalizer, 1, seed)
        return total, length

    def failure(self) -> Failure:
        """The reply to a message whose handler is raising now."""
        where = (
            "the evaluation environment"
            if self._current is None
            else f"environment {self._first_index + self._current}"
        )
        return Failure(where, traceback.format_exc())


class _OwnEnvs:
    """A worker's own environments as the one group that `envs.rollout.run` steps, in the worker itself."""

    def __init__(self, worker: _Worker):
        self._worker = worker
        self.groups = [range(len(worker._envs))]
        space = worker._envs[0].action_space
        self._low, self._high = space.low, space.high

    def send_step(self, group: int, actions: np.ndarray) -> None:
        if os.getppid() != self._worker.parent:
            raise SystemExit  # orphaned mid-rollout: nobody is left to take it (`serve` lets this through)
        np.clip(actions, self._low, self._high, out=self._worker._shared.actions)
        self._episodes = self._worker.step()

    def receive_step(self, group: int) -> StepResult:
        return self._worker._shared.result(*self._episodes)


_HANDLERS: dict[Kind, Callable[..., Any]] = {
    Kind.START: _Worker.start,
    Kind.ATTACH: _Worker.attach,
    Kind.RESET: _Worker.reset,
    Kind.STEP: _Worker.step,
    Kind.COLLECT: _Worker.collect,
    Kind.EPISODE: _Worker.episode,
}
"""What a worker does for each kind of message (`messages.Kind`) but `CLOSE`, called with its arguments."""


def dispatch(worker: _Worker, kind: Kind, arguments: tuple[Any, ...]) -> Any:
    """The result of `kind`'s handler on `arguments`; `UnknownKind` for a kind without one."""
    handler = _HANDLERS.get(kind)
    if handler is None:
        raise UnknownKind(kind)
    return handler(worker, *arguments)


def serve(channel_fd: int, buffer_fd: int) -> None:
    """Main loop of a worker process: run the parent's messages until it says close or goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    connection = Connection(channel_fd)
    worker = _Worker(buffer_fd, os.getppid())
    while True:
        try:
            while not connection.poll(POLL_SECONDS):
                if os.getppid() != worker.parent:
                    return
            kind, arguments = pickle.loads(connection.recv_bytes())
        except (EOFError, OSError):
            return
        if kind is Kind.CLOSE:
            return
        try:
            reply = dispatch(worker, kind, arguments)
        except UnknownKind:
            reply = Failure("its message loop", traceback.format_exc())
        except Exception:
            reply = worker.failure()
        try:
            connection.send_bytes(pickle.dumps(reply))
        except OSError:
            return
