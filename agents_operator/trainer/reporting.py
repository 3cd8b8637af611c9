"""How a trainer command ends: its exit code, a user's mistake as one line on stderr, TensorFlow's native log
lines filtered off stderr unless asked for (`tflogs`)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator

from agents_operator import exported, tflogs
from agents_operator.trainer import checkpoints, usage

FAILED = 1
USAGE_ERROR = 2
INTERRUPTED = 130
STOPPED = 128 + 15
"""A worker that left its job on SIGTERM (scaled away, or its pod stopped), as a shell reports a process that
SIGTERM ended: 128 and above is retried under restartPolicy ExitCode, and no exit 0 reads as a success."""

Command = Callable[[argparse.Namespace], int]


def command(name: str, run_command: Command) -> Command:
    """`run_command` with TensorFlow's native log lines filtered from stderr unless asked for (`tflogs`), and a
    usage.UsageError or an ExportError (exit code 2) or a CheckpointError (exit code 1) as one line on stderr."""

    def run(args: argparse.Namespace) -> int:
        with contextlib.ExitStack() as stack:
            if args.verbose:
                stack.enter_context(_environment(tflogs.ENV_VAR, "1"))  # for this command's subprocesses too
            if not tflogs.shown(os.environ):
                stack.enter_context(tflogs.filtered_stderr())
            return _reported(name, run_command, args)

    return run


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    """`name`=`value` in this process's environment for the length of the block."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def _reported(name: str, run_command: Command, args: argparse.Namespace) -> int:
    try:
        return run_command(args)
    except usage.UsageError as error:
        print(f"agents-operator {name}: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    except exported.ExportError as error:
        print(f"agents-operator {name}: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    except checkpoints.CheckpointError as error:
        print(f"agents-operator {name}: error: {error}", file=sys.stderr)
        return FAILED
    except KeyboardInterrupt:
        print(f"agents-operator {name}: interrupted", file=sys.stderr)
        return INTERRUPTED
