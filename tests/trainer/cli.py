"""Run the trainer's sub-commands as the main CLI does, without depending on it."""

import argparse

from agents_operator.trainer import commands


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="agents-operator")
    commands.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([str(a) for a in argv])
    return args.func(args)


def usage_error(capsys, *argv: str) -> str:
    """The one line a sub-command prints for a user's mistake (exit code 2, no traceback)."""
    code = run(*argv)
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    return err.strip()
