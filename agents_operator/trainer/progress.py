"""Training progress for a person: a redrawn bar on a terminal, plain log lines otherwise (pod logs)."""

from __future__ import annotations

import logging
import sys
import time
from typing import TextIO

log = logging.getLogger("agents_operator.trainer")

_BAR_WIDTH = 24


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _count(n: float) -> str:
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


class Progress:
    """Reports env steps, mean return, steps/s and the time left.

    On a TTY the bar is redrawn after every iteration; otherwise a log line is written at most every
    `interval` seconds (and for every `note`), so pod logs stay readable.
    """

    def __init__(self, total_steps: int, stream: TextIO | None = None, interval: float = 10.0):
        self.total = total_steps
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.interval = interval
        self._last_line = 0.0
        self._text = ""

    def update(self, env_steps: int, mean_return: float | None, steps_per_second: float) -> None:
        ret = "-" if mean_return is None else f"{mean_return:.1f}"
        stats = f"{_count(env_steps)}/{_count(self.total)} steps  return {ret}"
        if steps_per_second > 0:  # no speed, so no time left, before one is measured
            left = max(self.total - env_steps, 0) / steps_per_second
            stats += f"  {_count(steps_per_second)} steps/s  ETA {_duration(left)}"
        if self.tty:
            done = min(env_steps / self.total, 1.0)
            filled = int(done * _BAR_WIDTH)
            self._text = f"[{'#' * filled}{'.' * (_BAR_WIDTH - filled)}] {done:4.0%} {stats}"
            self.stream.write(f"\r\033[K{self._text}")
            self.stream.flush()
        elif time.monotonic() - self._last_line >= self.interval or env_steps >= self.total:
            self._last_line = time.monotonic()
            log.info("%s", stats)

    def say(self, message: str) -> None:
        """A line on the stream itself (the launcher's events) that does not break the bar."""
        if self.tty:
            self.stream.write("\r\033[K")
        self.stream.write(f"{message}\n")
        if self.tty and self._text:
            self.stream.write(self._text)
        self.stream.flush()

    def note(self, message: str) -> None:
        """A log line (evaluation, checkpoint) that does not break the bar."""
        if self.tty:
            self.stream.write("\r\033[K")
        log.info("%s", message)
        if self.tty and self._text:
            self.stream.write(self._text)
            self.stream.flush()

    def close(self) -> None:
        """End the bar's line, once, so that what follows starts on a line of its own."""
        if self.tty and self._text:
            self.stream.write("\n")
            self.stream.flush()
            self._text = ""
