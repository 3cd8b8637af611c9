"""The HTTP endpoint of the operator's and the trainer's metrics: one thread, bounded connections.

prometheus_client's `start_http_server` spends a thread on every connection and keeps it while the
client stays silent: 2,000 half-open connections made 2,108 threads, never released. Here every
connection is a coroutine on one event-loop thread; a request must arrive complete within
`timeout` seconds, at most `MAX_CONNECTIONS` are held (a new one beyond that closes the oldest, so a
scraper, which sends its request at once, is still answered during a flood), and each is closed after
its answer (HTTP/1.0).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

MAX_CONNECTIONS = 64
REQUEST_TIMEOUT_SECONDS = 5.0
MAX_REQUEST_BYTES = 8192
PATH = b"/metrics"


class MetricsServer:
    """Serves `registry` at http://<host>:<port>/metrics until `close`; OSError when the port cannot be bound."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int, timeout: float = REQUEST_TIMEOUT_SECONDS):
        self.registry = registry
        self.timeout = timeout
        self._writers: dict[asyncio.StreamWriter, None] = {}  # oldest first
        self._tasks: set[asyncio.Task] = set()
        # The loop runs on its own thread from the start, so a caller may be inside an event loop of its own
        # (the operator's kopf loop): binding is a coroutine submitted to it.
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="metrics-server", daemon=True)
        self._thread.start()
        starting = asyncio.start_server(self._serve, host or None, port, limit=MAX_REQUEST_BYTES)
        try:
            self._server = asyncio.run_coroutine_threadsafe(starting, self._loop).result()
        except BaseException:
            self._stop_loop()
            raise

    @property
    def port(self) -> int:
        return self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._tasks.add(asyncio.current_task())
        if len(self._writers) >= MAX_CONNECTIONS:
            oldest = next(iter(self._writers))
            del self._writers[oldest]
            oldest.transport.abort()  # its coroutine wakes to a closed connection and ends
        self._writers[writer] = None
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.timeout)
            writer.write(self._answer(head))
            await asyncio.wait_for(writer.drain(), self.timeout)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # silent, too slow, too long or gone: dropped
        finally:
            self._writers.pop(writer, None)
            writer.transport.abort()
            self._tasks.discard(asyncio.current_task())

    def _answer(self, head: bytes) -> bytes:
        words = head.split(b"\r\n", 1)[0].split()
        if len(words) != 3:
            return _response(b"400 Bad Request", b"text/plain", b"bad request line\n")
        if words[0] != b"GET":
            return _response(b"405 Method Not Allowed", b"text/plain", b"only GET\n")
        if words[1].split(b"?", 1)[0] != PATH:
            return _response(b"404 Not Found", b"text/plain", b"metrics are at /metrics\n")
        return _response(b"200 OK", CONTENT_TYPE_LATEST.encode(), generate_latest(self.registry))

    async def _shutdown(self) -> None:
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def close(self) -> None:
        """Stop listening, drop every connection and end the thread; safe to repeat."""
        if self._loop.is_closed():
            return
        with contextlib.suppress(TimeoutError):
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(self.timeout)
        self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


def _response(status: bytes, content_type: bytes, body: bytes) -> bytes:
    head = b"HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
    return head % (status, content_type, len(body)) + body
