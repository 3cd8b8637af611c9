"""trainer/reporting.py: how a trainer command ends (exit codes, one-line errors, -v and TensorFlow's lines)."""

from __future__ import annotations

import argparse
import os

import pytest

from agents_operator import exported, tflogs
from agents_operator.trainer import checkpoints, reporting, usage


def _ending(error: BaseException):
    def command(args: argparse.Namespace) -> int:
        raise error

    return command


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (
            usage.UsageError("--episodes must be at least 1"),
            reporting.USAGE_ERROR,
            "error: --episodes must be at least 1",
        ),
        (exported.ExportError("d: not an export"), reporting.USAGE_ERROR, "error: d: not an export"),
        (checkpoints.CheckpointError("ckpt-3 is unreadable"), reporting.FAILED, "error: ckpt-3 is unreadable"),
        (KeyboardInterrupt(), reporting.INTERRUPTED, "interrupted"),
    ],
)
def test_each_way_a_command_fails_is_its_exit_code_and_one_line(error, code, line, capsys):
    assert reporting.command("evaluate", _ending(error))(argparse.Namespace(verbose=False)) == code
    assert capsys.readouterr().err == f"agents-operator evaluate: {line}\n"


def test_a_bug_is_not_swallowed():
    with pytest.raises(ZeroDivisionError):
        reporting.command("train", _ending(ZeroDivisionError()))(argparse.Namespace(verbose=False))


@pytest.mark.parametrize("verbose", [False, True])
def test_verbose_asks_for_tensorflows_lines_while_the_command_runs_only(verbose, monkeypatch, capfd):
    monkeypatch.delenv(tflogs.ENV_VAR, raising=False)
    seen = {}

    def command(args: argparse.Namespace) -> int:
        seen["variable"] = os.environ.get(tflogs.ENV_VAR)
        os.write(2, b"I0000 00:00:1796195190.530192    6048 port.cc:153] oneDNN custom operations are on.\n")
        return 0

    assert reporting.command("plot", command)(argparse.Namespace(verbose=verbose)) == 0
    assert seen["variable"] == ("1" if verbose else None)
    assert tflogs.ENV_VAR not in os.environ
    assert ("oneDNN" in capfd.readouterr().err) is verbose
