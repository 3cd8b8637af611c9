"""TensorFlow's native log lines kept off a command's terminal, unless asked for.

TensorFlow 2.19 and later log from C++ through absl before `absl::InitializeLog()` and ignore
`TF_CPP_MIN_LOG_LEVEL` for those lines: every import prints absl's "All log messages before
absl::InitializeLog() is called are written to STDERR" and a oneDNN notice, and loading a SavedModel prints
grappler's "Not handling type DT_DOUBLE" warnings. They come from C++ on file descriptor 2, so no Python
logging setting reaches them. `filtered_stderr` puts a pipe on descriptor 2 for the length of a command and
forwards every line but those: the native INFO and WARNING lines (what `TF_CPP_MIN_LOG_LEVEL=2` meant),
and absl's notice. Native ERROR and FATAL lines, and everything else (Python's own stderr, tracebacks, the
env processes' lines), pass unchanged.

`ENV_VAR=1` (which `-v` sets, so that the command's subprocesses see it too) leaves descriptor 2 alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterator, Mapping

ENV_VAR = "AGENTS_TENSORFLOW_LOGS"
NATIVE_NOISE = re.compile(
    rb"^(?:"
    rb"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rb"|[IW]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w./-]+:\d+\] .*"  # absl's: I0000 00:00:1796.53 6048 port.cc:153] ...
    rb"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IW] [\w./-]+:\d+\] .*"  # TF's: 2026-12-02 07:06:24.48: W x.cc:1] ...
    rb")\r?\n?$"
)
DRAIN_SECONDS = 2.0  # for the forwarder to pass on what was written before the command ended


def shown(environ: Mapping[str, str]) -> bool:
    """Whether TensorFlow's own log lines are wanted."""
    return environ.get(ENV_VAR, "") not in ("", "0")


def is_noise(line: bytes) -> bool:
    return NATIVE_NOISE.match(line) is not None


def _forward(source: int, target: int) -> None:
    with os.fdopen(source, "rb", buffering=0) as lines:
        pending = b""
        while chunk := lines.read(65536):
            *whole, pending = (pending + chunk).split(b"\n")
            kept = b"".join(line + b"\n" for line in whole if not is_noise(line))
            if kept:
                os.write(target, kept)
        if pending and not is_noise(pending):
            os.write(target, pending)


@contextlib.contextmanager
def filtered_stderr() -> Iterator[None]:
    """Descriptor 2 through a filter that drops NATIVE_NOISE, until the block ends (see the module docstring).

    A subprocess started inside the block keeps writing through the filter for as long as this process lives.
    """
    sys.stderr.flush()
    terminal = os.dup(2)
    source, sink = os.pipe()
    forwarder = threading.Thread(target=_forward, args=(source, terminal), name="stderr-filter", daemon=True)
    forwarder.start()
    os.dup2(sink, 2)
    os.close(sink)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(terminal, 2)  # closes this process's last end of the pipe, unless a subprocess still holds one
        forwarder.join(DRAIN_SECONDS)
        if not forwarder.is_alive():
            os.close(terminal)
