"""`RemoteBatchEnv`: the environments of one or more env servers as one batch, a drop-in for `BatchEnv`; the
client of `envserver`.

The batch is the servers' environments in the order of `addresses`: with servers of 4 and 2 environments,
environments 0-3 live on the first, 4-5 on the second. Every call goes to all servers at once, so their
latencies overlap. Started with `--seed S + offset` (offset: the index of its first
environment in the batch), each server seeds its environments exactly as one `BatchEnv(seed=S)` would.

Faults. A call to a server that fails in a way reconnecting may cure (its process died or restarted, the
connection broke, it did not answer within `timeout`, or it refused the call as stale) makes the client
wait for the server's health check, with a backoff growing from 0.1 s to 5 s, and Reset it. Whatever
episodes its environments were in are discarded, never half-counted:

- `step` returns, for that server's environments: reward 0, terminated False, truncated True,
  final_observations = the last observations the client had from them (those the lost step acted on),
  observations = the reset server's first observations, and no episode return or length. PPO treats the
  cut like a time limit (it bootstraps from the value of the final observation); the reward scaler's running
  return restarts with the new episode.
- `collect` (rollout mode) sends the rollout again to the reset server, so the rollout is complete; it
  starts new episodes there (`Rollout.restarted`), and nothing of the lost rollout is kept.

- `run_episodes` (evaluation on the first server) waits for the server as above and sends the evaluation
  again, without resetting it: it needs no session. If the server restarted, the next step or collect
  finds its session stale and handles that as above. A rendering sent again skips the frames already
  passed on (the replayed episode renders the same frames).

A server that is busy (more calls than it admits) or still in another client's session counts as such a
fault too: a restarted trainer gets its servers back once their old sessions have been idle for the lease.

After `max_failures` failed calls to one server in a row (a successful reset, step, collect or evaluation
ends the streak; the default waits about 70 s) the client raises `EnvServerUnavailable` naming the server.
An environment that raised on a server raises `EnvServerError` with that failure in one line (the traceback
is in the server's log), and a request the server refused (INVALID_ARGUMENT: NaN actions, too many
episodes, ...) raises `EnvServerError` naming the field; neither is retried. After any of these, as after
any failure of a `BatchEnv`, the batch is unusable: close it.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from agents_operator.trainer.envs.noise import Noise
from agents_operator.trainer.envs.policy_message import policy_message
from agents_operator.trainer.envs.rollout import Rollout
from agents_operator.trainer.envs.types import BatchChecks, StepResult
from agents_operator.trainer.envserver import protocol
from agents_operator.trainer.envserver.connection import Connection, Fault
from agents_operator.trainer.ppo.normalize import Normalizer
from agents_operator.trainer.ppo.policy import NumpyPolicy

_LOG = logging.getLogger(__name__)


class RemoteBatchEnv(BatchChecks):
    """The environments of the env servers at `addresses` ("host:port"), with `BatchEnv`'s interface.

    `timeout` bounds every call but a rollout or an evaluation (`rollout_timeout`); `startup_timeout` is how
    long to wait for the servers to answer at first (they may still be starting, their names not yet
    resolving); `max_message_bytes` is the largest message sent or received (as the servers' own limit).
    """

    def __init__(
        self,
        addresses: Sequence[str],
        timeout: float = 60.0,
        rollout_timeout: float = 3600.0,
        max_failures: int = 20,
        startup_timeout: float = 300.0,
        max_message_bytes: int = protocol.MAX_MESSAGE_BYTES,
    ) -> None:
        if not addresses:
            raise ValueError("RemoteBatchEnv needs at least one env server address")
        self.addresses = list(addresses)
        self.timeout = timeout
        self.rollout_timeout = rollout_timeout
        self.max_failures = max_failures
        self._failure: str | None = None
        self._was_reset = False
        self._servers = [Connection.connect(address, max_message_bytes) for address in self.addresses]
        try:
            specs = [server.wait_for_spec(time.monotonic() + startup_timeout) for server in self._servers]
            _check_specs(self.addresses, specs)
        except BaseException:
            self.close()
            raise
        start = 0
        for server, spec in zip(self._servers, specs, strict=True):
            server.envs = range(start, start + spec["num_envs"])
            start = server.envs.stop
        self.env_id: str = specs[0]["env_id"]
        self.num_envs = start
        self.observation_shape: tuple[int, ...] = tuple(specs[0]["observation_shape"])
        self.action_shape: tuple[int, ...] = tuple(specs[0]["action_shape"])
        self.action_low: np.ndarray = specs[0]["action_low"].copy()
        self.action_high: np.ndarray = specs[0]["action_high"].copy()
        self.render_fps: float | None = specs[0]["render_fps"]

    def reset(self) -> np.ndarray:
        """Reset every environment; returns the first observations, (num_envs, *obs_shape) float32."""
        with self._guard():
            for server in self._servers:
                server.stepping = None  # a step in flight is superseded: the reset starts new sessions
            replies = self._exchange("Reset", lambda server: {"session": server.session}, self.timeout)
            for server, reply in zip(self._servers, replies, strict=True):
                try:
                    server.start_session(reply())
                    server.failures = 0
                except Fault as fault:
                    self._reconnect(server, fault)
            self._was_reset = True
            return np.concatenate([server.observations for server in self._servers])

    def step(self, actions: np.ndarray) -> StepResult:
        """Step every environment with its row of `actions` (each server clips them to the action bounds)."""
        actions = np.asarray(actions)
        self._check_actions(actions, self.num_envs)
        with self._guard():
            replies = self._exchange(
                "Step", lambda server: {"actions": actions[server.rows], "session": server.session}, self.timeout
            )
            return StepResult.concatenate(
                [self._step_result(server, reply) for server, reply in zip(self._servers, replies, strict=True)]
            )

    @property
    def groups(self) -> list[range]:
        """The environments of each server, in batch order: the groups that `send_step` and `receive_step`
        step independently of one another."""
        return [server.envs for server in self._servers]

    def send_step(self, group: int, actions: np.ndarray) -> None:
        """Start stepping the environments of `groups[group]` with `actions` and return at once;
        `receive_step(group)` waits for the result (`BatchEnv.send_step`)."""
        server = self._servers[group]
        self._check_actions(actions, len(server.envs))
        if server.stepping is not None:
            raise RuntimeError(
                f"{self.env_id} RemoteBatchEnv: group {group} is already stepping; receive_step it first"
            )
        with self._guard():
            message = {"actions": np.asarray(actions), "session": server.session}
            if len(self._servers) == 1:
                # Nothing to overlap with: a blocking call when the reply is wanted costs less than a future.
                server.stepping = functools.partial(server.call, "Step", message, self.timeout)
            else:
                server.stepping = server.send("Step", message, self.timeout)

    def receive_step(self, group: int) -> StepResult:
        """Wait for the step `send_step(group, ...)` started; the result has the rows of `groups[group]`."""
        server = self._servers[group]
        self._check_usable()
        if server.stepping is None:
            raise RuntimeError(f"{self.env_id} RemoteBatchEnv: group {group} is not stepping; send_step it first")
        reply, server.stepping = server.stepping, None
        with self._guard():
            return self._step_result(server, reply)

    def _step_result(self, server: Connection, reply: Callable[[], dict[str, Any]]) -> StepResult:
        """The step of `server` from its `reply`; a server that failed it is reset (see `_restart`)."""
        try:
            part = StepResult(**reply())
            server.failures = 0
        except Fault as fault:
            part = self._restart(server, fault)
        server.observations = part.observations
        return part

    def collect(self, policy: NumpyPolicy, observations: Normalizer, noise: Noise) -> Rollout:
        """Rollout mode: each server acts with `policy` for `noise.steps` steps of its environments, normalising
        observations with `observations`' shared statistics and sampling with its rows of `noise`."""
        if not self._was_reset:
            raise RuntimeError(f"{self.env_id} RemoteBatchEnv: call reset() before collect()")
        request = protocol.collect_message(policy, observations, noise)

        def message(server: Connection) -> dict[str, Any]:
            return {**request, **noise.rows(server.rows).to_message(), "session": server.session}

        with self._guard():
            replies = self._exchange("Collect", message, self.rollout_timeout)
            parts = []
            for server, reply in zip(self._servers, replies, strict=True):
                restarted = False
                while True:
                    try:
                        part = Rollout.from_message(reply())
                        server.failures = 0
                        break
                    except Fault as fault:
                        self._reconnect(server, fault)
                        restarted = True
                        reply = functools.partial(server.call, "Collect", message(server), self.rollout_timeout)
                part.restarted[:] = restarted
                server.observations = part.observations[-1]
                parts.append(part)
            return Rollout.concatenate(parts)

    def run_episodes(
        self,
        policy: NumpyPolicy,
        observations: Normalizer,
        episodes: int,
        seed: int,
        on_frame: Callable[[np.ndarray], None] | None = None,
    ) -> tuple[list[float], list[int]]:
        """`episodes.run_episodes`, played by the first server on an environment of its own (the batch's
        episodes go on undisturbed): the same returns and lengths for the same policy and seed.

        With `on_frame`, the server renders (Render) and sends each episode's frames in chunks of at most half
        a message, which are passed to `on_frame` as they come; each episode is a call of its own, so that the
        server holds one episode's frames at most.
        """
        request = policy_message(policy, observations)
        calls = [(seed + episode, 1) for episode in range(episodes)] if on_frame is not None else [(seed, episodes)]
        returns: list[float] = []
        lengths: list[int] = []
        with self._guard():
            for first_seed, count in calls:
                reply = self._evaluate({**request, "episodes": count, "seed": first_seed}, on_frame)
                returns += reply["returns"].tolist()
                lengths += reply["lengths"].tolist()
        return returns, lengths

    def close(self) -> None:
        """Close the connections; the servers keep running (they belong to whoever started them)."""
        self._failure = "it is closed"
        for server in self._servers:
            server.channel.close()

    def __enter__(self) -> RemoteBatchEnv:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _exchange(
        self, method: str, message: Callable[[Connection], dict[str, Any]], timeout: float
    ) -> list[Callable[[], dict[str, Any]]]:
        """Call `method` on every server at once; per server, a function that returns the reply or raises as
        `Connection.call` does. The last server gets a blocking call, made once the others' futures are sent: a
        future costs 0.2-0.6 ms more per call, and one server (a sidecar) is the common case."""
        *others, last = self._servers
        replies = [server.send(method, message(server), timeout) for server in others]
        try:
            reply = last.call(method, message(last), timeout)
        except Fault as fault:
            replies.append(functools.partial(_raise, fault))
        else:
            replies.append(functools.partial(dict, reply))
        return replies

    def _restart(self, server: Connection, fault: Fault) -> StepResult:
        """The step of a server that failed it: reconnect and reset, and cut its episodes (module docstring)."""
        last = server.observations
        self._reconnect(server, fault)
        n = len(server.envs)
        return StepResult(
            observations=server.observations,
            rewards=np.zeros(n, np.float32),
            terminated=np.zeros(n, bool),
            truncated=np.ones(n, bool),
            final_observations=last,
            episode_returns=[],
            episode_lengths=[],
        )

    def _evaluate(self, message: dict[str, Any], on_frame: Callable[[np.ndarray], None] | None) -> dict[str, Any]:
        """The reply of the first server to an Evaluate call, or to a Render call whose frames go to `on_frame`;
        retried (without a reset) while it faults. A Render sent again replays the same episode (same seed), so
        the frames `on_frame` already had are skipped."""
        server = self._servers[0]
        delivered = 0

        def call() -> dict[str, Any]:
            nonlocal delivered
            if on_frame is None:
                return server.call("Evaluate", message, self.rollout_timeout)
            received = 0
            for reply in server.stream(protocol.RENDER, message, self.rollout_timeout):
                if "returns" in reply:
                    return reply
                frames = reply["frames"]
                for frame in frames[max(0, delivered - received) :]:
                    on_frame(frame)
                received += len(frames)
                delivered = max(delivered, received)
            raise Fault("the frames ended without the episode's returns")

        try:
            reply = call()
        except Fault as fault:
            reply = server.retry(fault, call, self.max_failures)
        server.failures = 0
        return reply

    def _reconnect(self, server: Connection, fault: Fault) -> None:
        """Wait for `server` and reset it (see `Connection.retry`)."""
        reset = functools.partial(server.call, "Reset", {"session": server.session}, self.timeout)
        server.retry(fault, lambda: server.start_session(reset()), self.max_failures)
        _LOG.warning("env server %s reset; the episodes in flight there were discarded", server.address)


def connect(addresses: Sequence[str], env_id: str, **options: Any) -> RemoteBatchEnv:
    """A `RemoteBatchEnv` (with `options`) of the env servers at `addresses`, which must serve `env_id`."""
    env = RemoteBatchEnv(addresses, **options)
    if env.env_id != env_id:
        env.close()
        raise ValueError(f"env server {addresses[0]} serves {env.env_id}, not {env_id}")
    return env


def _raise(fault: Fault) -> dict[str, Any]:
    raise fault


def _check_specs(addresses: list[str], specs: list[dict[str, Any]]) -> None:
    """All servers of one batch must serve the same environment."""

    def key(spec: dict[str, Any]) -> tuple:
        bounds = (tuple(spec["action_low"].tolist()), tuple(spec["action_high"].tolist()))
        return spec["env_id"], tuple(spec["observation_shape"]), tuple(spec["action_shape"]), bounds

    for address, spec in zip(addresses[1:], specs[1:], strict=True):
        if key(spec) != key(specs[0]):
            raise ValueError(
                f"env servers of one batch must serve the same environment: {addresses[0]} serves "
                f"{specs[0]['env_id']} {key(specs[0])[1:]}, {address} serves {spec['env_id']} {key(spec)[1:]}"
            )
