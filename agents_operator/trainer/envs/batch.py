"""A batch of gymnasium environments stepped in parallel by worker subprocesses: the parent's side.

The trainer steps `num_envs` environments at once. They live in worker processes, several per process: a
pipe round trip costs 170-590 us, 20-50% of one locomotion step, so one message per process and step pays
it once for many environments. Actions, observations, rewards and done flags travel through one shared
memory buffer that every worker writes its slice of; the pipe carries only a small command and, when
episodes end, their returns. Each process's environments are a group that can be stepped on its own
(`send_step`, `receive_step`); `collect` goes further for the trainer's sampling: each worker gets the
policy's weights and its rows of a rollout's noise, and runs the whole rollout for its environments
(`envs.rollout.run`) with no exchange per step, the policy's cost shared among the workers.
`run_episodes` spreads evaluation episodes over the workers in the same way: each plays whole episodes on an
environment of its own, apart from the batch.

Workers are fresh `python -c` interpreters rather than multiprocessing children: spawn and forkserver
re-import the parent's `__main__` (the trainer, which imports TensorFlow) and fork would copy TensorFlow's
threads. A fresh interpreter also lets the parent set single-threaded BLAS/OpenMP variables before numpy
loads. What runs in them is `worker`; the memory both sides share is laid out by `shared`.

The protocol follows BatchPPO's ExternalProcess (`agents/tools/wrappers.py`): a worker catches every
exception and sends its traceback back to be re-raised, the parent waits with timeouts so Ctrl-C gets
through, and close runs at exit. A worker ignores SIGINT (the parent shuts it down) and exits when its pipe
reaches end-of-file or its parent changes (checked while it waits and at every step of a rollout it runs), so
no worker outlives the trainer, however the trainer dies. A rollout in flight delays a clean close by at
most the grace period: then the worker is killed.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import mmap
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

import gymnasium as gym
import numpy as np

from agents_operator.trainer.envs import messages
from agents_operator.trainer.envs.episodes import Played
from agents_operator.trainer.envs.make import usable_cpus
from agents_operator.trainer.envs.messages import Attach, Collect, Episode, Failure, Kind, Start, encode
from agents_operator.trainer.envs.noise import Noise, check_noise
from agents_operator.trainer.envs.policy_message import policy_message
from agents_operator.trainer.envs.rollout import Rollout
from agents_operator.trainer.envs.shared import POLL_SECONDS, Layout
from agents_operator.trainer.envs.types import BatchChecks, EnvProcessError, StepResult
from agents_operator.trainer.ppo.normalize import Normalizer
from agents_operator.trainer.ppo.policy import NumpyPolicy

# Every environment process runs one environment at a time: threaded BLAS would only oversubscribe cores.
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")
# How long close waits for workers to exit by themselves before killing them.
_CLOSE_SECONDS = 2.0
_WORKER_CODE = "import sys; from agents_operator.trainer.envs.worker import serve; serve(*map(int, sys.argv[1:]))"


class BatchEnv(BatchChecks):
    """`num_envs` copies of one environment, stepped in parallel by worker subprocesses.

    Environment j is seeded with `seed + j` on the first `reset`; later resets, including the automatic
    ones after an episode ends, continue each environment's random stream. `envs_per_process` defaults to
    spreading the batch evenly over one process per usable CPU, which measured fastest
    (see `benchmarks/bench_sampling_throughput.py`). Only Box observation and action spaces are supported.

    After any failure (an environment raised, a worker died, an interrupt mid-step) the batch is unusable:
    close it and make a new one.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        envs_per_process: int | None = None,
        seed: int = 0,
        max_episode_steps: int | None = None,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        if envs_per_process is None:
            envs_per_process = math.ceil(num_envs / usable_cpus())
        if envs_per_process < 1:
            raise ValueError(f"envs_per_process must be at least 1, got {envs_per_process}")
        self.env_id = env_id
        self.num_envs = num_envs
        self._failure: str | None = None
        self._was_reset = False
        self._buffer_file = _anonymous_file()
        environment = _worker_environment()
        self._workers = [
            _WorkerHandle.start(env_id, envs, self._buffer_file.fileno(), environment)
            for envs in _split(num_envs, math.ceil(num_envs / envs_per_process))
        ]
        self.num_processes = len(self._workers)
        self._shutdown = weakref.finalize(self, _shut_down, self._workers, self._buffer_file)
        try:
            spaces = self._round_trip(
                lambda worker: encode(
                    Kind.START, Start(env_id, max_episode_steps, worker.envs.start, seed, len(worker.envs))
                )
            )
            observation_space, action_space = spaces[0]
            _check_spaces(env_id, observation_space, action_space)
            self.observation_shape: tuple[int, ...] = observation_space.shape
            self.action_shape: tuple[int, ...] = action_space.shape
            self.action_low: np.ndarray = action_space.low.copy()
            self.action_high: np.ndarray = action_space.high.copy()
            layout = Layout(num_envs, self.observation_shape, self.action_shape, action_space.dtype.str)
            os.ftruncate(self._buffer_file.fileno(), layout.nbytes)
            self._memory = mmap.mmap(self._buffer_file.fileno(), layout.nbytes)
            self._shared = layout.arrays(self._memory)
            self._round_trip(lambda worker: encode(Kind.ATTACH, Attach(layout, worker.envs.start, worker.envs.stop)))
        except BaseException:
            self.close()
            raise

    @classmethod
    def for_episodes(cls, env_id: str, max_episode_steps: int | None, episodes: int) -> BatchEnv:
        """A batch to play `episodes` evaluation episodes on (`run_episodes`): one process per usable CPU, or per
        episode when there are fewer, each with one environment."""
        return cls(env_id, min(episodes, usable_cpus()), envs_per_process=1, max_episode_steps=max_episode_steps)

    def reset(self) -> np.ndarray:
        """Reset every environment; returns the first observations, (num_envs, *obs_shape) float32."""
        self._round_trip(lambda worker: encode(Kind.RESET))
        self._was_reset = True
        return self._shared.observations.copy()

    def step(self, actions: np.ndarray) -> StepResult:
        """Step every environment with its row of `actions`, clipped to the action bounds."""
        actions = np.asarray(actions)
        self._check_actions(actions, self.num_envs)
        for group, envs in enumerate(self.groups):
            self.send_step(group, actions[envs.start : envs.stop])
        return StepResult.concatenate([self.receive_step(group) for group in range(self.num_processes)])

    @property
    def groups(self) -> list[range]:
        """The environments of each worker process, in batch order: the groups that `send_step` and
        `receive_step` step independently of one another."""
        return [worker.envs for worker in self._workers]

    def send_step(self, group: int, actions: np.ndarray) -> None:
        """Start stepping the environments of `groups[group]` with `actions` (one row each, clipped to the
        action bounds) and return at once; `receive_step(group)` waits for the result. Other groups can be
        sent, received or still stepping meanwhile: a sampler acts for one group while others simulate."""
        worker = self._workers[group]
        self._check_actions(actions, len(worker.envs))
        if worker.stepping:
            raise RuntimeError(f"{self.env_id} BatchEnv: group {group} is already stepping; receive_step it first")
        with self._guard():
            rows = self._shared.rows(worker.envs.start, worker.envs.stop)
            np.clip(actions, self.action_low, self.action_high, out=rows.actions)
            worker.send(messages.STEP)
            worker.stepping = True

    def receive_step(self, group: int) -> StepResult:
        """Wait for the step `send_step(group, ...)` started; the result has the rows of `groups[group]`."""
        worker = self._workers[group]
        self._check_usable()
        if not worker.stepping:
            raise RuntimeError(f"{self.env_id} BatchEnv: group {group} is not stepping; send_step it first")
        with self._guard():
            returns, lengths = worker.receive()
            worker.stepping = False
        return self._shared.rows(worker.envs.start, worker.envs.stop).result(returns, lengths)

    def collect(
        self, policy: NumpyPolicy, observations: Normalizer, noise: Noise, first_acting: np.ndarray | None = None
    ) -> Rollout:
        """`envs.rollout.run` over the whole batch, with the policy acting in the worker processes: each runs
        the rollout for its own environments, with no exchange per step. Same `Rollout`, to the bit, as
        `run` over this batch in this process, without the `observations` argument: the workers
        start from where their environments are."""
        self._check_usable()
        if not self._was_reset:
            raise RuntimeError(f"{self.env_id} BatchEnv: call reset() before collect()")
        check_noise(noise, policy, self.num_envs, self.action_shape)
        request = policy_message(policy, observations)

        def message(worker: _WorkerHandle) -> bytes:
            rows = slice(worker.envs.start, worker.envs.stop)
            first = None if first_acting is None else first_acting[rows]
            return encode(Kind.COLLECT, Collect(request, noise.rows(rows), first))

        return Rollout.concatenate(self._round_trip(message))

    def run_episodes(self, policy: NumpyPolicy, observations: Normalizer, episodes: int, seed: int) -> Played:
        """`episodes.run_episodes` spread over the worker processes: each plays whole episodes of the
        deterministic policy on an evaluation environment of its own (the batch's episodes go on undisturbed)
        and is given the next seed when one ends, so up to `num_processes` episodes play at once.

        The same returns and lengths, in episode order, as `LocalEpisodes.run_episodes` for the same policy and
        seed, whatever the number of processes: an episode depends only on its seed (`episodes`), and the
        policy acts there as here, on one observation at a time with the same arithmetic.
        """
        request = policy_message(policy, observations)
        played: list[tuple[float, int]] = [(0.0, 0)] * episodes
        queue = iter(range(episodes))
        playing: dict[Connection, tuple[_WorkerHandle, int]] = {}

        def give_next(worker: _WorkerHandle) -> None:
            episode = next(queue, None)
            if episode is not None:
                worker.send(encode(Kind.EPISODE, Episode(request, seed + episode)))
                playing[worker.connection] = worker, episode

        self._receive_steps()
        with self._guard():
            for worker in self._workers:
                give_next(worker)
            while playing:
                # Wake up now and then, so that Ctrl-C gets through; a worker that dies ends its pipe.
                for connection in wait(list(playing), POLL_SECONDS):
                    worker, episode = playing.pop(connection)
                    played[episode] = worker.receive()
                    give_next(worker)
        return [total for total, _ in played], [length for _, length in played]

    def kill(self) -> None:
        """Kill the worker processes at once; safe from another thread. A call in progress then fails with
        `EnvProcessError` within a poll interval, and the batch is unusable: `close` it."""
        for worker in self._workers:
            worker.process.kill()

    def close(self) -> None:
        """Stop the workers: ask them to exit, kill those that have not after a short grace period."""
        self._failure = "it is closed"
        self._shutdown()
        self.__dict__.pop("_shared", None)  # numpy views pin the mapping open
        if hasattr(self, "_memory"):
            self._memory.close()

    def __enter__(self) -> BatchEnv:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _round_trip(self, message: Callable[[_WorkerHandle], bytes]) -> list[Any]:
        """Send `message(worker)` to every worker, then collect their results in worker order.

        Workers run concurrently between the two loops. A step in flight is received first.
        """
        self._receive_steps()
        with self._guard():
            for worker in self._workers:
                worker.send(message(worker))
            return [worker.receive() for worker in self._workers]

    def _receive_steps(self) -> None:
        """Receive (and drop) the steps in flight, so that every worker is ready for the next command."""
        for group, worker in enumerate(self._workers):
            if worker.stepping:
                self.receive_step(group)


@dataclass
class _WorkerHandle:
    """The parent's end of one worker process."""

    env_id: str
    envs: range
    process: subprocess.Popen[bytes]
    connection: Connection
    stepping: bool = False  # a step was sent and its reply not yet received

    @classmethod
    def start(cls, env_id: str, envs: range, buffer_fd: int, environment: dict[str, str]) -> _WorkerHandle:
        parent_end, child_end = socket.socketpair()
        with child_end:
            process = subprocess.Popen(
                [sys.executable, "-c", _WORKER_CODE, str(child_end.fileno()), str(buffer_fd)],
                pass_fds=(child_end.fileno(), buffer_fd),
                env=environment,
                stdin=subprocess.DEVNULL,
            )
        return cls(env_id, envs, process, Connection(parent_end.detach()))

    def send(self, message: bytes) -> None:
        """Send a message (`messages.encode`)."""
        try:
            self.connection.send_bytes(message)
        except OSError:
            raise EnvProcessError(self._death_notice()) from None

    def receive(self) -> Any:
        try:
            while not self.connection.poll(POLL_SECONDS):
                if self.process.poll() is not None:
                    raise EOFError
            reply = pickle.loads(self.connection.recv_bytes())
        except (EOFError, OSError):
            raise EnvProcessError(self._death_notice()) from None
        if isinstance(reply, Failure):
            where, formatted = reply
            raise EnvProcessError(f"{self.env_id}: {where} raised in worker process {self.process.pid}:\n{formatted}")
        return reply

    def _death_notice(self) -> str:
        where = (
            f"{self.env_id}: worker process {self.process.pid} (environments {self.envs.start}-{self.envs.stop - 1})"
        )
        try:
            code = self.process.wait(_CLOSE_SECONDS)
        except subprocess.TimeoutExpired:
            return f"{where} stopped answering"
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        return f"{where} died with {how}"


def _shut_down(workers: list[_WorkerHandle], buffer_file: Any) -> None:
    """Close every worker (gracefully, then by force) and the shared buffer; safe to call twice."""
    for worker in workers:
        with contextlib.suppress(OSError):
            worker.connection.send_bytes(messages.CLOSE)
    deadline = time.monotonic() + _CLOSE_SECONDS
    for worker in workers:
        try:
            worker.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait()
        worker.connection.close()
    buffer_file.close()


def _check_spaces(env_id: str, observation_space: Any, action_space: Any) -> None:
    for kind, space in (("observation", observation_space), ("action", action_space)):
        if not isinstance(space, gym.spaces.Box):
            raise ValueError(f"{env_id}: BatchEnv supports Box {kind} spaces only, got {space}")


def _split(num_envs: int, num_processes: int) -> list[range]:
    """Consecutive, near-equal ranges of environment indices, one per process."""
    bounds = [round(i * num_envs / num_processes) for i in range(num_processes + 1)]
    return [range(start, stop) for start, stop in itertools.pairwise(bounds)]


def _anonymous_file() -> Any:
    """A file that lives only in memory (or at least has no name), to back the shared buffer."""
    if hasattr(os, "memfd_create"):
        return os.fdopen(os.memfd_create("agents-batch-env"), "r+b")
    return tempfile.TemporaryFile()


def _worker_environment() -> dict[str, str]:
    """The parent's environment, single-threaded numerics and the parent's import path.

    The import path makes environments registered by the parent's modules (e.g. "tests.module:Env-v0")
    importable in the worker, as multiprocessing's spawn does.
    """
    environment = dict(os.environ)
    environment.update(dict.fromkeys(_THREAD_VARIABLES, "1"))
    environment["PYTHONPATH"] = os.pathsep.join(path or os.getcwd() for path in sys.path)
    return environment
