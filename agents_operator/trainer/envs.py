"""A batch of gymnasium environments stepped in parallel by worker subprocesses.

The trainer steps `num_envs` environments at once. They live in worker processes, several per process: a
pipe round trip costs 170-590 us, 20-50% of one locomotion step, so one message per process and step pays
it once for many environments. Actions, observations, rewards and done flags travel through one shared
memory buffer that every worker writes its slice of; the pipe carries only a small command and, when
episodes end, their returns. Each process's environments are a group that can be stepped on its own
(`send_step`, `receive_step`); `collect` goes further for the trainer's sampling: each worker gets the
policy's weights and its rows of a rollout's noise, and runs the whole rollout for its environments
(`rollouts.run`) with no exchange per step, the policy's cost shared among the workers.

Workers are fresh `python -c` interpreters rather than multiprocessing children: spawn and forkserver
re-import the parent's `__main__` (the trainer, which imports TensorFlow) and fork would copy TensorFlow's
threads. A fresh interpreter also lets the parent set single-threaded BLAS/OpenMP variables before numpy
loads.

The protocol follows BatchPPO's ExternalProcess (`agents/tools/wrappers.py`): a worker catches every
exception and sends its traceback back to be re-raised, the parent waits with timeouts so Ctrl-C gets
through, and close runs at exit. A worker ignores SIGINT (the parent shuts it down) and exits when its pipe
reaches end-of-file or its parent changes (checked while it waits and at every step of a rollout it runs), so
no worker outlives the trainer, however the trainer dies. A rollout in flight delays a clean close by at
most the grace period: then the worker is killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
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
import traceback
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

if TYPE_CHECKING:
    from agents_operator.trainer.normalize import Normalizer
    from agents_operator.trainer.ppo.policy import NumpyPolicy
    from agents_operator.trainer.rollouts import Rollout

# Every environment process runs one environment at a time: threaded BLAS would only oversubscribe cores.
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")
# How often a waiting side wakes up to check that its peer is still alive.
_POLL_SECONDS = 0.5
# How long close waits for workers to exit by themselves before killing them.
_CLOSE_SECONDS = 2.0
_WORKER_CODE = "import sys; from agents_operator.trainer.envs import _serve; _serve(*map(int, sys.argv[1:]))"


class EnvProcessError(RuntimeError):
    """An environment raised in its worker process, or the worker process died."""


@dataclass
class StepResult:
    """One step of every environment of the batch."""

    observations: np.ndarray
    """(num_envs, *obs_shape) float32: the next observation; the first one of the next episode where an
    episode just ended (workers reset finished environments themselves)."""
    rewards: np.ndarray
    """(num_envs,) float32."""
    terminated: np.ndarray
    """(num_envs,) bool: the episode reached a terminal state."""
    truncated: np.ndarray
    """(num_envs,) bool: the episode hit its time limit."""
    final_observations: np.ndarray
    """(num_envs, *obs_shape) float32: the last observation of the episode where it just ended (to bootstrap
    truncated episodes from), else equal to `observations`."""
    episode_returns: list[float]
    """Undiscounted returns (raw rewards) of the episodes that ended in this step, in environment order."""
    episode_lengths: list[int]
    """Lengths of those episodes."""

    @classmethod
    def concatenate(cls, parts: list[StepResult]) -> StepResult:
        """The step results of consecutive groups of environments as one."""
        merged = {}
        for item in dataclasses.fields(cls):
            values = [getattr(part, item.name) for part in parts]
            merged[item.name] = (
                list(itertools.chain(*values)) if isinstance(values[0], list) else np.concatenate(values)
            )
        return cls(**merged)


def make_env(env_id: str, max_episode_steps: int | None = None, render_mode: str | None = None) -> gym.Env:
    """One environment with float32 observations, optionally under a time limit.

    PyBullet tasks (ids containing "Bullet") are registered on first use and their start-up chatter is
    silenced. An id of the form "module:Name-v0" imports `module` first, which may register `Name-v0`.
    """
    bullet = "Bullet" in env_id
    if bullet:
        _register_pybullet_envs()
    # Environments that cannot render do not take a render_mode argument at all.
    options = {} if render_mode is None else {"render_mode": render_mode}
    env = gym.make(env_id, max_episode_steps=max_episode_steps, **options)
    if bullet:
        env = _QuietConnect(env)
    space = env.observation_space
    if isinstance(space, gym.spaces.Box) and space.dtype != np.float32:
        env = gym.wrappers.DtypeObservation(env, np.float32)
    return env


def usable_cpus() -> int:
    """CPUs this process may use: its affinity, bounded by a cgroup CPU quota (a Kubernetes CPU limit)."""
    cpus = len(os.sched_getaffinity(0))
    with contextlib.suppress(OSError, ValueError):
        with open("/sys/fs/cgroup/cpu.max") as quota_file:
            quota, period = quota_file.read().split()
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    return cpus


class BatchChecks:
    """What `BatchEnv` and `envserver.client.RemoteBatchEnv` check alike before they talk to their workers or
    servers: the batch is still usable (no failure yet), was reset, and actions have the shape of the rows."""

    env_id: str
    action_shape: tuple[int, ...]
    _failure: str | None
    _was_reset: bool

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise RuntimeError(f"{self.env_id} {type(self).__name__} is unusable: {self._failure}")

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Refuse to talk to the workers or servers once the batch is unusable; make it unusable when an
        exchange fails (whatever interrupts one leaves replies in flight)."""
        self._check_usable()
        try:
            yield
        except BaseException as error:
            self._failure = f"an earlier call failed with {type(error).__name__}"
            raise

    def _check_actions(self, actions: np.ndarray, rows: int) -> None:
        self._check_usable()
        if not self._was_reset:
            raise RuntimeError(f"{self.env_id} {type(self).__name__}: call reset() before step()")
        expected = (rows, *self.action_shape)
        if np.shape(actions) != expected:
            raise ValueError(f"actions must have shape {expected}, got {np.shape(actions)}")


class BatchEnv(BatchChecks):
    """`num_envs` copies of one environment, stepped in parallel by worker subprocesses.

    Environment j is seeded with `seed + j` on the first `reset`; later resets, including the automatic
    ones after an episode ends, continue each environment's random stream. `envs_per_process` defaults to
    spreading the batch evenly over one process per usable CPU, which measured fastest
    (see `benchmarks/sampling.py`). Only Box observation and action spaces are supported.

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
                lambda worker: ("start", (env_id, max_episode_steps, worker.envs.start, seed, len(worker.envs)))
            )
            observation_space, action_space = spaces[0]
            _check_spaces(env_id, observation_space, action_space)
            self.observation_shape: tuple[int, ...] = observation_space.shape
            self.action_shape: tuple[int, ...] = action_space.shape
            self.action_low: np.ndarray = action_space.low.copy()
            self.action_high: np.ndarray = action_space.high.copy()
            layout = _Layout(num_envs, self.observation_shape, self.action_shape, action_space.dtype.str)
            os.ftruncate(self._buffer_file.fileno(), layout.nbytes)
            self._memory = mmap.mmap(self._buffer_file.fileno(), layout.nbytes)
            self._shared = layout.arrays(self._memory)
            self._round_trip(lambda worker: ("attach", (layout, worker.envs.start, worker.envs.stop)))
        except BaseException:
            self.close()
            raise

    def reset(self) -> np.ndarray:
        """Reset every environment; returns the first observations, (num_envs, *obs_shape) float32."""
        self._round_trip(lambda worker: ("reset", ()))
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
            worker.send(("step", ()))
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
        self, policy: NumpyPolicy, observations: Normalizer, noise: np.ndarray, first_acting: np.ndarray | None = None
    ) -> Rollout:
        """`rollouts.run` over the whole batch, with the policy acting in the worker processes: each runs
        the rollout for its own environments, with no exchange per step. Same `Rollout`, to the bit, as
        `rollouts.run` over this batch in this process, without the `observations` argument: the workers
        start from where their environments are."""
        from agents_operator.trainer import rollouts

        self._check_usable()
        if not self._was_reset:
            raise RuntimeError(f"{self.env_id} BatchEnv: call reset() before collect()")
        if noise.ndim != 3 or noise.shape[1:] != (self.num_envs, *self.action_shape):
            raise ValueError(
                f"noise must have shape (steps, {self.num_envs}, {self.action_shape[0]}), got {noise.shape}"
            )
        request = rollouts.policy_message(policy, observations)

        def message(worker: _WorkerHandle) -> tuple[str, tuple[Any, ...]]:
            rows = slice(worker.envs.start, worker.envs.stop)
            first = None if first_acting is None else first_acting[rows]
            return "collect", ({**request, "noise": noise[:, rows], "first_acting": first},)

        return rollouts.Rollout.concatenate(self._round_trip(message))

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

    def _round_trip(self, message: Callable[[_WorkerHandle], tuple[str, tuple[Any, ...]]]) -> list[Any]:
        """Send `message(worker)` to every worker, then collect their results in worker order.

        Workers run concurrently between the two loops. A step in flight is received first.
        """
        for group, worker in enumerate(self._workers):
            if worker.stepping:
                self.receive_step(group)
        with self._guard():
            for worker in self._workers:
                worker.send(message(worker))
            return [worker.receive() for worker in self._workers]


@dataclass(frozen=True)
class _Layout:
    """Where each array of the batch lives in the shared buffer; both sides compute the same offsets."""

    num_envs: int
    observation_shape: tuple[int, ...]
    action_shape: tuple[int, ...]
    action_dtype: str

    def _fields(self) -> list[tuple[str, tuple[int, ...], np.dtype]]:
        observations = (self.num_envs, *self.observation_shape)
        return [
            ("actions", (self.num_envs, *self.action_shape), np.dtype(self.action_dtype)),
            ("observations", observations, np.dtype(np.float32)),
            ("final_observations", observations, np.dtype(np.float32)),
            ("rewards", (self.num_envs,), np.dtype(np.float32)),
            ("terminated", (self.num_envs,), np.dtype(bool)),
            ("truncated", (self.num_envs,), np.dtype(bool)),
        ]

    @property
    def nbytes(self) -> int:
        return sum(_aligned(math.prod(shape) * dtype.itemsize) for _, shape, dtype in self._fields())

    def arrays(self, memory: mmap.mmap) -> _SharedArrays:
        arrays, offset = {}, 0
        for name, shape, dtype in self._fields():
            arrays[name] = np.ndarray(shape, dtype, buffer=memory, offset=offset)
            offset += _aligned(arrays[name].nbytes)
        return _SharedArrays(**arrays)


@dataclass
class _SharedArrays:
    actions: np.ndarray
    observations: np.ndarray
    final_observations: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray

    def rows(self, start: int, stop: int) -> _SharedArrays:
        return _SharedArrays(
            **{name: array[start:stop] for name, array in vars(self).items()}  # views, not copies
        )

    def result(self, episode_returns: list[float], episode_lengths: list[int]) -> StepResult:
        """The step these rows hold, copied out."""
        return StepResult(
            observations=self.observations.copy(),
            rewards=self.rewards.copy(),
            terminated=self.terminated.copy(),
            truncated=self.truncated.copy(),
            final_observations=self.final_observations.copy(),
            episode_returns=episode_returns,
            episode_lengths=episode_lengths,
        )


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

    def send(self, message: tuple[str, tuple[Any, ...]]) -> None:
        try:
            self.connection.send_bytes(pickle.dumps(message))
        except OSError:
            raise EnvProcessError(self._death_notice()) from None

    def receive(self) -> Any:
        try:
            while not self.connection.poll(_POLL_SECONDS):
                if self.process.poll() is not None:
                    raise EOFError
            ok, result = pickle.loads(self.connection.recv_bytes())
        except (EOFError, OSError):
            raise EnvProcessError(self._death_notice()) from None
        if not ok:
            index, formatted = result
            raise EnvProcessError(
                f"{self.env_id}: environment {index} raised in worker process {self.process.pid}:\n{formatted}"
            )
        return result

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
            worker.connection.send_bytes(pickle.dumps(("close", ())))
    deadline = time.monotonic() + _CLOSE_SECONDS
    for worker in workers:
        try:
            worker.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait()
        worker.connection.close()
    buffer_file.close()


# --- the worker side ------------------------------------------------------------------------------------


class _Worker:
    """The environments of one worker process and the commands the parent sends them."""

    def __init__(self, buffer_fd: int, parent: int) -> None:
        self._buffer_fd = buffer_fd
        self.parent = parent  # the pid of the process that started this one
        self._envs: list[gym.Env] = []
        self._seeds: list[int | None] = []
        self._first_index = 0
        self._current = 0

    def start(
        self, env_id: str, max_episode_steps: int | None, first_index: int, seed: int, count: int
    ) -> tuple[gym.Space, gym.Space]:
        self._first_index = first_index
        for index in range(count):
            self._current = index
            self._envs.append(make_env(env_id, max_episode_steps))
        self._seeds = [seed + first_index + index for index in range(count)]
        self._returns = [0.0] * count
        self._lengths = [0] * count
        return self._envs[0].observation_space, self._envs[0].action_space

    def attach(self, layout: _Layout, start: int, stop: int) -> None:
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
        return returns, lengths

    def collect(self, message: dict[str, Any]) -> Rollout:
        """A rollout of this process's environments from where they are, acting with the message's policy."""
        from agents_operator.trainer import rollouts

        policy, normalizer = rollouts.parse_request(message, self._shared.observations.shape[1:])
        observations, first_acting = self._shared.observations.copy(), message["first_acting"]
        return rollouts.run(_OwnEnvs(self), observations, policy, normalizer, message["noise"], first_acting)

    def failure(self) -> tuple[int, str]:
        return self._first_index + self._current, traceback.format_exc()


class _OwnEnvs:
    """A worker's own environments as the one group that `rollouts.run` steps, in the worker itself."""

    def __init__(self, worker: _Worker):
        self._worker = worker
        self.groups = [range(len(worker._envs))]
        space = worker._envs[0].action_space
        self._low, self._high = space.low, space.high

    def send_step(self, group: int, actions: np.ndarray) -> None:
        if os.getppid() != self._worker.parent:
            raise SystemExit  # orphaned mid-rollout: nobody is left to take it (`_serve` lets this through)
        np.clip(actions, self._low, self._high, out=self._worker._shared.actions)
        self._episodes = self._worker.step()

    def receive_step(self, group: int) -> StepResult:
        return self._worker._shared.result(*self._episodes)


def _serve(channel_fd: int, buffer_fd: int) -> None:
    """Main loop of a worker process: run the parent's commands until it says close or goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    connection = Connection(channel_fd)
    worker = _Worker(buffer_fd, os.getppid())
    while True:
        try:
            while not connection.poll(_POLL_SECONDS):
                if os.getppid() != worker.parent:
                    return
            command, arguments = pickle.loads(connection.recv_bytes())
        except (EOFError, OSError):
            return
        if command == "close":
            return
        try:
            reply = (True, getattr(worker, command)(*arguments))
        except Exception:
            reply = (False, worker.failure())
        try:
            connection.send_bytes(pickle.dumps(reply))
        except OSError:
            return


# --- helpers --------------------------------------------------------------------------------------------


def _register_pybullet_envs() -> None:
    """Import PyBullet and its gymnasium registrations without the build banner it prints to stderr."""
    if "pybullet_envs_gymnasium" in sys.modules:
        return
    with _silenced(2):
        import pybullet  # noqa: F401
        import pybullet_envs_gymnasium  # noqa: F401


class _QuietConnect(gym.Wrapper):
    """Silences the `argv[0]=` lines PyBullet writes to stdout when the first reset connects it."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._connected = False

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        if self._connected:
            return self.env.reset(**kwargs)
        with _silenced(1):
            result = self.env.reset(**kwargs)
        self._connected = True
        return result


@contextlib.contextmanager
def _silenced(fd: int) -> Iterator[None]:
    """Point a file descriptor at /dev/null for a while, so that C code printing to it goes nowhere."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(fd)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
        yield
    finally:
        ctypes.CDLL(None).fflush(None)  # C stdio buffers what it writes to a pipe or file: drop it here.
        os.dup2(saved, fd)
        os.close(saved)
        os.close(null)


def _check_spaces(env_id: str, observation_space: Any, action_space: Any) -> None:
    for kind, space in (("observation", observation_space), ("action", action_space)):
        if not isinstance(space, gym.spaces.Box):
            raise ValueError(f"{env_id}: BatchEnv supports Box {kind} spaces only, got {space}")


def _split(num_envs: int, num_processes: int) -> list[range]:
    """Consecutive, near-equal ranges of environment indices, one per process."""
    bounds = [round(i * num_envs / num_processes) for i in range(num_processes + 1)]
    return [range(start, stop) for start, stop in itertools.pairwise(bounds)]


def _aligned(nbytes: int) -> int:
    return -(-nbytes // 64) * 64


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
