"""``opsbroker``: the command line. Each subcommand lives in its own module.

To add a subcommand, write ``broker/_cli_<name>.py`` with ``add_parser(subparsers)`` (which
registers the parser and sets ``handler=run``) and add its module name to :data:`SUBCOMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["SUBCOMMANDS", "main"]

SUBCOMMANDS = [
    "broker._cli_serve",
    "broker._cli_audit",
    "agent_side._cli_call",
    "agent_side._cli_run",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="opsbroker", description="A sandboxed remote-operations broker for AI agent tools."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(name).add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``opsbroker`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    args = build_parser().parse_args(argv)
    status: int = args.handler(args)
    return status


if __name__ == "__main__":
    sys.exit(main())
