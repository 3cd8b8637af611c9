"""Run the trainer's sub-commands as the main CLI does, without depending on it."""

import argparse

from agents_operator.trainer import commands


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="agents-operator")
    commands.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([str(a) for a in argv])
    return args.func(args)
