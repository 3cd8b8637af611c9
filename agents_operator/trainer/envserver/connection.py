"""The client's end of one env server (`Connection`): its calls, the faults that reconnecting may cure (`Fault`)
and the errors it does not (`EnvServerError`), and the waits: for the server to come up, and with growing
backoff after a fault (`Connection.retry`). `client.RemoteBatchEnv` holds one per server.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np

from agents_operator.trainer.envserver import protocol

_LOG = logging.getLogger(__name__)
_BACKOFF_START_SECONDS = 0.1
_BACKOFF_MAX_SECONDS = 5.0
_STARTUP_LOG_SECONDS = 10.0  # while waiting for a server to come up, log a line this often
# Codes that retrying cannot cure: something else listens at the address, a message is too large, or the
# server refused the request itself (sending it again would be refused again).
_FATAL_CODES = frozenset(
    {grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INVALID_ARGUMENT}
)


class EnvServerError(RuntimeError):
    """An env server failed a call: an environment raised there (the message holds its traceback), the
    server refused the request, or it cannot be reached."""


class EnvServerUnavailable(EnvServerError):
    """An env server failed too many calls in a row, or did not come up in time."""


class Fault(Exception):
    """A failed call that reconnecting may cure."""


@dataclass
class Connection:
    """The client's end of one env server."""

    address: str
    channel: grpc.Channel
    envs: range = range(0)
    session: str | None = None
    observations: np.ndarray | None = None  # the last raw observations received
    failures: int = 0  # calls failed in a row
    stepping: Callable[[], dict[str, Any]] | None = None  # the reply of a step sent and not yet received
    _calls: dict[str, Any] = field(default_factory=dict)  # the gRPC multi-callables, by method

    @classmethod
    def connect(cls, address: str, max_message_bytes: int) -> Connection:
        channel = grpc.insecure_channel(address, options=protocol.channel_options(max_message_bytes))
        calls: dict[str, Any] = {m: channel.unary_unary(protocol.method_path(m)) for m in protocol.METHODS}
        calls[protocol.RENDER] = channel.unary_stream(protocol.method_path(protocol.RENDER))
        calls["Health"] = channel.unary_unary(f"/{protocol.HEALTH_SERVICE}/{protocol.HEALTH_METHOD}")
        return cls(address, channel, _calls=calls)

    @property
    def rows(self) -> slice:
        """This server's rows of a batch."""
        return slice(self.envs.start, self.envs.stop)

    def send(self, method: str, message: dict[str, Any], timeout: float) -> Callable[[], dict[str, Any]]:
        """Start a call; the function returned waits for its reply (see `call`)."""
        future = self._calls[method].future(protocol.encode(message), timeout=timeout)
        return functools.partial(self._reply, future.result)

    def call(self, method: str, message: dict[str, Any], timeout: float, wait_for_ready: bool = False) -> dict:
        """The reply of a call; raises `Fault` for what reconnecting may cure, `EnvServerError` otherwise."""
        data = protocol.encode(message)
        return self._reply(lambda: self._calls[method](data, timeout=timeout, wait_for_ready=wait_for_ready))

    def stream(self, method: str, message: dict[str, Any], timeout: float) -> Iterator[dict[str, Any]]:
        """The replies of a streaming call, as they come; raises as `call` does."""
        replies = self._calls[method](protocol.encode(message), timeout=timeout)
        while (data := self._invoke(functools.partial(next, replies, None))) is not None:
            yield self._checked(protocol.decode(data))

    def _reply(self, invoke: Callable[[], bytes]) -> dict[str, Any]:
        return self._checked(protocol.decode(self._invoke(invoke)))

    def _invoke(self, invoke: Callable[[], Any]) -> Any:
        try:
            return invoke()
        except grpc.RpcError as error:
            detail = f"{error.code().name}: {error.details()}"
            if error.code() in _FATAL_CODES:
                raise EnvServerError(f"env server {self.address}: {detail}") from None
            raise Fault(detail) from None

    def _checked(self, reply: dict[str, Any]) -> dict[str, Any]:
        if "error" in reply:
            if reply["stale"]:
                raise Fault(f"stale session: {reply['error']}")
            where = f"env server {self.address} (environments {self.envs.start}-{self.envs.stop - 1})"
            raise EnvServerError(f"{where}: {reply['error']}")
        return reply

    def healthy(self, timeout: float) -> bool:
        """Whether the server answers its health check within `timeout` (waiting for it to come up)."""
        try:
            return self._calls["Health"](b"", timeout=timeout, wait_for_ready=True) == protocol.HEALTH_SERVING
        except grpc.RpcError:
            return False

    def start_session(self, reply: dict[str, Any]) -> None:
        self.session, self.observations = reply["session"], reply["observations"]

    def wait_for_spec(self, deadline: float) -> dict[str, Any]:
        """The server's Spec, waiting for it to come up until `deadline` (`time.monotonic`), logging meanwhile."""
        while True:
            wait = min(_STARTUP_LOG_SECONDS, deadline - time.monotonic())
            try:
                return self.call("Spec", {}, max(wait, 0.001), wait_for_ready=True)
            except Fault as fault:
                if time.monotonic() >= deadline:
                    raise EnvServerUnavailable(f"env server {self.address} did not answer: {fault}") from None
                _LOG.info("waiting for env server %s (%s)", self.address, fault)

    def retry(self, fault: Fault, call: Callable[[], Any], max_failures: int) -> Any:
        """Wait for the server with growing backoff, then make `call`, until it succeeds; give up after
        `max_failures` failed calls in a row (the one that brought us here included): the default 20 wait
        about 70 s in all."""
        _LOG.warning("env server %s failed (%s); reconnecting", self.address, fault)
        while True:
            self.failures += 1
            if self.failures >= max_failures:
                raise EnvServerUnavailable(
                    f"env server {self.address} failed {self.failures} times in a row; last: {fault}"
                )
            delay = min(_BACKOFF_MAX_SECONDS, _BACKOFF_START_SECONDS * 2 ** (self.failures - 1))
            try:
                if not self.healthy(delay):
                    raise Fault(f"no answer to its health check within {delay:g} s")
                return call()
            except Fault as next_fault:
                fault = next_fault
