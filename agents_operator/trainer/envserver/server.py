"""The environment server: a `BatchEnv` behind the gRPC methods of `protocol`.

`agents-operator env-server --env ID --envs N` runs one. Its environments live in BatchEnv's worker
subprocesses, as in the trainer, so the server has exactly BatchEnv's semantics (environment j seeded with
seed + j, automatic resets, final observations, episode returns), spreads a large batch over the cores it
has, and outlives an environment that crashes its process: the failure goes back to the client with the
environment's traceback, and the next Reset builds a fresh batch.

A server belongs to one client (the trainer worker it serves). Calls run one at a time under a lock; the
health check does not take it, so probes answer during a long rollout. Every Reset issues a new session
token, and Step and Collect must carry the current one: a request meant for environments the server no
longer has (it restarted, or another client reset it) is refused as stale rather than stepping episodes
the client never saw begin.

Evaluate plays whole episodes of the deterministic policy (`wrappers.run_episodes`, rendering them if
asked) on an environment of its own, made in the server process on first use, so that evaluating and
rendering need no simulator in the trainer and leave the batch's episodes and session alone.

On SIGTERM or SIGINT the server stops taking calls, gives a call in flight a second to finish, closes its
environments and exits 0. Its environment processes also exit by themselves when the server dies.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import secrets
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import numpy as np

from agents_operator.trainer import rollouts
from agents_operator.trainer.envs import BatchEnv, EnvProcessError
from agents_operator.trainer.envserver import DEFAULT_PORT, protocol
from agents_operator.trainer.wrappers import LocalEpisodes

_LOG = logging.getLogger(__name__)
_GRACE_SECONDS = 1.0
_THREADS = 4  # one call at a time holds the environments; the others are health checks and stale requests
ALL_INTERFACES = "[::]"
"""Where an env server listens unless told otherwise: every interface (in a pod the workers come by pod IP)."""


class StartError(Exception):
    """The server cannot start: its port is taken, or its environment is not one BatchEnv can run."""


class _Stale(Exception):
    """A request for a session that is not the server's current one."""


class EnvService:
    """The environments of one server and what each method does to them."""

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int = 0,
        max_episode_steps: int | None = None,
        envs_per_process: int | None = None,
    ):
        self._make = functools.partial(
            BatchEnv,
            env_id,
            num_envs,
            envs_per_process=envs_per_process,
            seed=seed,
            max_episode_steps=max_episode_steps,
        )
        self._env: BatchEnv | None = self._make()
        # Evaluate's environments, by whether they render; each is made on first use.
        self._episodes = {render: LocalEpisodes(env_id, max_episode_steps, render) for render in (False, True)}
        self.spec = {
            "env_id": env_id,
            "num_envs": num_envs,
            "observation_shape": list(self._env.observation_shape),
            "action_shape": list(self._env.action_shape),
            "action_low": self._env.action_low,
            "action_high": self._env.action_high,
            "render_fps": self._episodes[False].render_fps,
        }
        self._episodes[False].close()  # made only to read the frame rate
        self._lock = threading.Lock()
        self._session: str | None = None

    def handler(self, method: str) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        """The gRPC handler of `method`: decode, run under the lock, encode the reply or the failure."""
        run = {
            "Spec": self._spec,
            "Reset": self._reset,
            "Step": self._step,
            "Collect": self._collect,
            "Evaluate": self._evaluate,
        }[method]

        def handle(data: bytes, context: grpc.ServicerContext) -> bytes:
            with self._lock:
                try:
                    reply = run(protocol.decode(data))
                except _Stale as error:
                    reply = {"error": str(error), "stale": True}
                except Exception as error:
                    self._recover(method, error)
                    _LOG.warning("%s failed: %s", method, error)
                    reply = {"error": f"{type(error).__name__}: {error}", "stale": False}
            return protocol.encode(reply)

        return handle

    def close(self) -> None:
        """Close the environments; does not wait for a call in flight (one may be stuck in an environment)."""
        if self._env is not None:
            self._env.close()
        self._close_episodes()

    def _spec(self, message: dict[str, Any]) -> dict[str, Any]:
        return self.spec

    def _reset(self, message: dict[str, Any]) -> dict[str, Any]:
        if self._env is None:
            self._env = self._make()
        observations = self._env.reset()
        self._session = secrets.token_hex(8)
        _LOG.info("reset %d environments (session %s)", self._env.num_envs, self._session)
        return {"observations": observations, "session": self._session}

    def _step(self, message: dict[str, Any]) -> dict[str, Any]:
        env = self._current(message)
        return vars(env.step(message["actions"]))

    def _collect(self, message: dict[str, Any]) -> dict[str, Any]:
        env = self._current(message)
        policy, normalizer = rollouts.parse_request(message, env.observation_shape)
        return env.collect(policy, normalizer, message["noise"]).to_message()

    def _evaluate(self, message: dict[str, Any]) -> dict[str, Any]:
        render = bool(message["render"])
        episodes = self._episodes[render]
        policy, normalizer = rollouts.parse_request(message, episodes.observation_shape)
        frames: list[np.ndarray] = []
        returns, lengths = episodes.run_episodes(
            policy, normalizer, message["episodes"], message["seed"], frames.append if render else None
        )
        reply = {"returns": np.array(returns, np.float64), "lengths": np.array(lengths, np.int64)}
        if render:
            reply["frames"] = np.stack(frames)
        return reply

    def _current(self, message: dict[str, Any]) -> BatchEnv:
        if self._session is None or message.get("session") != self._session:
            raise _Stale(f"session {message.get('session')} is not current ({self._session or 'not reset'})")
        assert self._env is not None
        return self._env

    def _recover(self, method: str, error: Exception) -> None:
        """Leave nothing a failed call may have broken in use."""
        if method == "Evaluate":
            # Its environment may be in any state: the next Evaluate makes a fresh one. The batch is untouched.
            self._close_episodes()
            return
        # Whatever the environments' state now is, the client must reset before it steps again.
        self._session = None
        if isinstance(error, EnvProcessError):
            self._discard_env()

    def _discard_env(self) -> None:
        """After an environment failed, its batch is unusable: close it now, build a fresh one on Reset."""
        if self._env is not None:
            self._env.close()
            self._env = None

    def _close_episodes(self) -> None:
        for episodes in self._episodes.values():
            episodes.close()


def start(service: EnvService, port: int, host: str = ALL_INTERFACES) -> tuple[grpc.Server, int]:
    """A started gRPC server for `service` and the port it listens on (`port` 0 picks a free one)."""
    server = grpc.server(
        ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix="env-server"), options=protocol.SERVER_OPTIONS
    )
    methods = {method: grpc.unary_unary_rpc_method_handler(service.handler(method)) for method in protocol.METHODS}
    health = {protocol.HEALTH_METHOD: grpc.unary_unary_rpc_method_handler(lambda *_: protocol.HEALTH_SERVING)}
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(protocol.SERVICE, methods),
            grpc.method_handlers_generic_handler(protocol.HEALTH_SERVICE, health),
        )
    )
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError:
        bound = 0
    if not bound:
        raise StartError(f"cannot listen on port {port} (in use?)")
    server.start()
    return server, bound


def serve(
    env_id: str,
    num_envs: int,
    port: int = DEFAULT_PORT,
    seed: int = 0,
    max_episode_steps: int | None = None,
    envs_per_process: int | None = None,
    host: str = ALL_INTERFACES,
) -> int:
    """Serve on `host` until SIGTERM or SIGINT; prints one line with the port once it listens. Returns the
    exit code."""
    with _until_signalled() as stopping:
        try:
            service = EnvService(env_id, num_envs, seed, max_episode_steps, envs_per_process)
        except ValueError as error:  # e.g. a discrete action space
            raise StartError(str(error)) from None
        try:
            server, bound = start(service, port, host)
            print(f"env-server: serving {num_envs} x {env_id} on port {bound}", flush=True)
            stopping.wait()
            server.stop(_GRACE_SECONDS).wait()
        finally:
            service.close()
    return 0


@contextlib.contextmanager
def _until_signalled() -> Iterator[threading.Event]:
    """An event that SIGTERM or SIGINT sets while inside; the handlers that were there before come back after."""
    stopping = threading.Event()
    previous = {number: signal.signal(number, lambda *_: stopping.set()) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stopping
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
