"""The environment server: a `BatchEnv` behind the gRPC methods of `protocol`.

`agents-operator env-server --env ID --envs N` runs one. Its environments live in BatchEnv's worker
subprocesses, as in the trainer, so the server has exactly BatchEnv's semantics (environment j seeded with
seed + j, automatic resets, final observations, episode returns), spreads a large batch over the cores it
has, and outlives an environment that crashes its process: the failure goes back to the client in one line
(its traceback goes to this server's log), and the next Reset builds a fresh batch.

Every request is checked before an environment sees it (`requests`): NaN or infinite actions, wrong shapes,
more episodes or steps than `requests.Limits` allows are refused with INVALID_ARGUMENT, and the session stays.

A server belongs to one client (the trainer worker it serves), identified by the session token it got at
its Reset: Step and Collect must carry the current token (a request for environments the server no longer
has, after a restart, is refused as stale rather than stepping episodes the client never saw begin), and a
Reset replaces a live session only when it carries that token or the session has been idle for
`Limits.session_lease_seconds`. A token, not the peer address: a sidecar's clients all come from loopback,
and a client reconnecting after a dropped connection comes from a new port. The lease lets a restarted
client, which lost its token, take its environments back once the old session has gone quiet.

Calls run one at a time under a lock. At most `CONCURRENT_CALLS` are admitted at once (more are refused as
busy), and the thread pool has one thread more, so the health check always finds a thread, however long a
rollout runs. A call waiting for the lock, and an evaluation between two steps, stop as soon as the call has
ended (its deadline passed, its client cancelled it, or the server is stopping). A Collect runs in the
worker processes, which cannot look at the call: when it ends, a watching thread kills them, the session
ends and the next Reset makes a fresh batch. `Limits.max_rollout_steps` bounds a Collect as well.

Evaluate plays whole episodes of the deterministic policy (`episodes.run_episodes`) on an environment of
its own, made in the server process on first use, so that evaluating needs no simulator in the trainer and
leaves the batch's episodes and session alone; Render does the same on a rendering environment and streams
the frames in chunks of at most half a message.

On SIGTERM or SIGINT the server stops taking calls, gives a call in flight a second to finish (an
evaluation stops at its next step), closes its environments and exits 0. Its environment processes also
exit by themselves when the server dies.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import gymnasium
import numpy as np

from agents_operator import contract
from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envs.episodes import LocalEpisodes, run_episodes
from agents_operator.trainer.envs.types import EnvProcessError
from agents_operator.trainer.envserver import protocol, requests
from agents_operator.trainer.envserver.requests import Limits, Refused

_LOG = logging.getLogger(__name__)
_GRACE_SECONDS = 1.0
_POLL_SECONDS = 0.1  # how often a call waiting for the environments checks whether its client still waits
CONCURRENT_CALLS = 3
"""Calls of the service admitted at once (one runs, the others wait for it); more are refused as busy."""
_THREADS = CONCURRENT_CALLS + 1  # the one more is the health check's: a busy service cannot starve it
ALL_INTERFACES = "[::]"
"""Where an env server listens unless told otherwise: every interface (in a pod the workers come by pod IP)."""


class StartError(Exception):
    """The server cannot start: its port is taken, or its environment is not one BatchEnv can run."""


class _Stale(Exception):
    """A request for a session that is not the server's current one, or a Reset of another client's session."""


class _Cancelled(Exception):
    """The call ended before its work did: the client cancelled it, its deadline passed, or the server stops."""


class _Call:
    """One call in flight, and whether its client still waits for it."""

    def __init__(self, context: grpc.ServicerContext):
        self._context = context
        self._ended = threading.Event()
        # is_active() alone can lag behind a cancellation; the termination callback cannot.
        context.add_callback(self._ended.set)

    def check(self) -> None:
        """Raise `_Cancelled` once the call has ended (cancelled, past its deadline, or the server stopping)."""
        if self._ended.is_set() or not self._context.is_active():
            raise _Cancelled("the call ended (cancelled, past its deadline, or the server is stopping)")

    @contextlib.contextmanager
    def stopping(self, stop: Callable[[], None]) -> Iterator[None]:
        """Run `stop` from a watching thread if the call ends while the block runs, and then turn the failure
        it causes into `_Cancelled`: for work that cannot check between steps (a Collect, in the workers)."""
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                if self._ended.wait(_POLL_SECONDS) or not self._context.is_active():
                    stop()
                    return

        watcher = threading.Thread(target=watch, name="env-server-call-watch", daemon=True)
        watcher.start()
        try:
            yield
        except EnvProcessError:
            self.check()
            raise
        finally:
            done.set()
            watcher.join()


class _Watched(gymnasium.Wrapper):
    """An environment that refuses to step once its call has ended, so an evaluation stops within a step."""

    def __init__(self, env: gymnasium.Env, call: _Call):
        super().__init__(env)
        self._call = call

    def step(self, action: Any) -> Any:
        self._call.check()
        return self.env.step(action)


class EnvService:
    """The environments of one server and what each method does to them."""

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int = 0,
        max_episode_steps: int | None = None,
        envs_per_process: int | None = None,
        limits: Limits | None = None,
    ):
        self.limits = limits or Limits()
        self._make = functools.partial(
            BatchEnv,
            env_id,
            num_envs,
            envs_per_process=envs_per_process,
            seed=seed,
            max_episode_steps=max_episode_steps,
        )
        self._env: BatchEnv | None = self._make()
        # Evaluate's and Render's environments; each is made on first use.
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
        self._slots = threading.BoundedSemaphore(CONCURRENT_CALLS)
        self._session: str | None = None
        self._last_used = 0.0  # time.monotonic() at the end of the session's last call

    def handler(self, method: str) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        """The gRPC handler of unary `method`: decode, run under the lock, encode the reply or the failure."""
        run = {
            "Spec": self._spec,
            "Reset": self._reset,
            "Step": self._step,
            "Collect": self._collect,
            "Evaluate": self._evaluate,
        }[method]

        def handle(data: bytes, context: grpc.ServicerContext) -> bytes:
            call = _Call(context)
            with self._admitted(context):
                message = _decode(method, data, context)
                try:
                    with self._locked(call):
                        reply = self._outcome(method, run, message, call)
                except _Cancelled:
                    return b""  # nobody waits for it
            if isinstance(reply, Refused):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{method}: {reply}")
            return protocol.encode(reply)

        return handle

    def render_handler(self, data: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        """The gRPC handler of Render (server streaming): play the episodes under the lock, keeping their frames,
        then send the frames in chunks of at most half a message and, last, the returns and lengths."""
        call = _Call(context)
        frames: list[np.ndarray] = []
        with self._admitted(context):
            message = _decode("Render", data, context)
            try:
                with self._locked(call):
                    reply = self._outcome("Render", functools.partial(self._render, frames=frames), message, call)
            except _Cancelled:
                return
        if isinstance(reply, Refused):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Render: {reply}")
        budget = self.limits.max_message_bytes // protocol.CHUNK_FRACTION
        while frames:
            count = max(1, budget // frames[0].nbytes)
            chunk, frames[:count] = frames[:count], []
            yield protocol.encode({"frames": np.stack(chunk)})
        yield protocol.encode(reply)

    def close(self) -> None:
        """Close the environments, once the call in flight has ended or after a grace period (one may be stuck
        in an environment)."""
        locked = self._lock.acquire(timeout=_GRACE_SECONDS)
        try:
            if self._env is not None:
                self._env.close()
            self._close_episodes()
        finally:
            if locked:
                self._lock.release()

    @contextlib.contextmanager
    def _admitted(self, context: grpc.ServicerContext) -> Iterator[None]:
        """Admit at most CONCURRENT_CALLS calls at once, so that a thread stays free for the health check."""
        if not self._slots.acquire(blocking=False):
            context.abort(grpc.StatusCode.UNAVAILABLE, f"env server busy: {CONCURRENT_CALLS} calls in progress")
        try:
            yield
        finally:
            self._slots.release()

    @contextlib.contextmanager
    def _locked(self, call: _Call) -> Iterator[None]:
        """Hold the environments; waiting for them ends when the call does (`_Cancelled`)."""
        while not self._lock.acquire(timeout=_POLL_SECONDS):
            call.check()
        try:
            yield
        finally:
            self._lock.release()

    def _outcome(
        self, method: str, run: Callable[..., dict[str, Any]], message: dict[str, Any], call: _Call
    ) -> dict[str, Any] | Refused:
        """The reply of `run`, the refusal of a bad request, or a one-line failure (its traceback is logged)."""
        try:
            return run(message, call)
        except Refused as refusal:
            return refusal
        except _Cancelled:
            _LOG.info("%s stopped: its call ended", method)
            raise
        except _Stale as error:
            return {"error": str(error), "stale": True}
        except Exception as error:
            _LOG.exception("%s failed", method)
            self._recover(method, error)
            return {"error": _one_line(error), "stale": False}
        finally:
            if self._session is not None and message.get("session") == self._session:
                self._last_used = time.monotonic()

    def _spec(self, message: dict[str, Any], call: _Call) -> dict[str, Any]:
        return self.spec

    def _reset(self, message: dict[str, Any], call: _Call) -> dict[str, Any]:
        self._check_owner(message.get("session"))
        if self._env is None:
            self._env = self._make()
        observations = self._env.reset()
        self._session = secrets.token_hex(8)
        self._last_used = time.monotonic()
        _LOG.info("reset %d environments (session %s)", self._env.num_envs, self._session)
        return {"observations": observations, "session": self._session}

    def _step(self, message: dict[str, Any], call: _Call) -> dict[str, Any]:
        env = self._current(message)
        return vars(env.step(requests.actions(message, env.num_envs, env.action_shape)))

    def _collect(self, message: dict[str, Any], call: _Call) -> dict[str, Any]:
        env = self._current(message)
        policy, normalizer = requests.policy(message, env.observation_shape, env.action_shape)
        noise = requests.noise(message, env.num_envs, policy, self.limits)
        try:
            with call.stopping(env.kill):  # the rollout runs in the workers: killing them ends it
                return env.collect(policy, normalizer, noise).to_message()
        except _Cancelled:
            self._session = None
            self._discard_env()  # the next Reset makes a fresh batch
            raise

    def _evaluate(self, message: dict[str, Any], call: _Call) -> dict[str, Any]:
        return self._play(self._episodes[False], message, call, None)

    def _render(self, message: dict[str, Any], call: _Call, frames: list[np.ndarray]) -> dict[str, Any]:
        budget = self.limits.max_message_bytes // protocol.CHUNK_FRACTION
        held = 0

        def keep(frame: np.ndarray) -> None:
            nonlocal held
            held += frame.nbytes
            if frame.nbytes > budget or held > self.limits.max_render_bytes:
                frames.clear()
                raise Refused(
                    f"render: frames of {frame.nbytes} bytes, {held} in all, exceed the server's limits "
                    f"({budget} per frame, max_render_bytes {self.limits.max_render_bytes} per call)"
                )
            frames.append(frame)

        return self._play(self._episodes[True], message, call, keep)

    def _play(
        self,
        episodes: LocalEpisodes,
        message: dict[str, Any],
        call: _Call,
        on_frame: Callable[[np.ndarray], None] | None,
    ) -> dict[str, Any]:
        """`episodes.run_episodes` on `episodes`' environment, stopped within a step once the call ends."""
        count, seed = requests.episodes(message, self.limits)
        policy, normalizer = requests.policy(message, episodes.observation_shape, episodes.action_shape)
        returns, lengths = run_episodes(_Watched(episodes.env, call), policy, normalizer, count, seed, on_frame)
        return {"returns": np.array(returns, np.float64), "lengths": np.array(lengths, np.int64)}

    def _current(self, message: dict[str, Any]) -> BatchEnv:
        if self._session is None or message.get("session") != self._session:
            raise _Stale(f"session {message.get('session')} is not current ({self._session or 'not reset'})")
        assert self._env is not None
        return self._env

    def _check_owner(self, token: str | None) -> None:
        """A Reset replaces the current session only for the client holding its token, or once the session has
        been idle for the lease (its client is gone: a restarted worker gets its environments back)."""
        idle = time.monotonic() - self._last_used
        lease = self.limits.session_lease_seconds
        if self._session is not None and token != self._session and idle < lease:
            raise _Stale(
                f"the environments are in another client's session (idle {idle:.1f} s); "
                f"a Reset without its token waits until it has been idle {lease:g} s"
            )

    def _recover(self, method: str, error: Exception) -> None:
        """Leave nothing a failed call may have broken in use."""
        if method in ("Evaluate", "Render"):
            # Its environment may be in any state: the next call makes a fresh one. The batch is untouched.
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


def _decode(method: str, data: bytes, context: grpc.ServicerContext) -> dict[str, Any]:
    """The request, or the call aborted with INVALID_ARGUMENT naming what does not decode."""
    try:
        return protocol.decode(data)
    except protocol.ProtocolError as error:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{method}: {error}")
        raise  # abort raises; this line is for type checkers


def _one_line(error: Exception) -> str:
    """`error` for the client in one line: its first and last lines (for an environment's failure, where it
    raised and the exception); the whole traceback is in the server's log."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = " ... ".join(dict.fromkeys(lines[:1] + lines[-1:]))
    return f"{type(error).__name__}: {text} (traceback in the env server's log)"


def start(service: EnvService, port: int, host: str = ALL_INTERFACES) -> tuple[grpc.Server, int]:
    """A started gRPC server for `service` and the port it listens on (`port` 0 picks a free one)."""
    server = grpc.server(
        ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix="env-server"),
        options=protocol.server_options(service.limits.max_message_bytes),
    )
    methods = {method: grpc.unary_unary_rpc_method_handler(service.handler(method)) for method in protocol.METHODS}
    methods[protocol.RENDER] = grpc.unary_stream_rpc_method_handler(service.render_handler)
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
    port: int = contract.ENV_SERVER_PORT,
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
