"""``opsbroker``: the command line. Each subcommand lives in its own module.

To add a subcommand, write ``broker/_cli_<name>.py`` with ``add_parser(subparsers)`` (which
registers the parser and sets ``handler=run``) and add its module name to :data:`SUBCOMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

__all__ = ["SUBCOMMANDS", "OneLineParser", "main"]

EXIT_USAGE = 2  # argparse's status for a usage error, kept

SUBCOMMANDS = [
    "broker._cli_serve",
    "broker._cli_audit",
    "agent_side._cli_call",
    "agent_side._cli_run",
]


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (no usage block), status 2.

    ``opsbroker: error: MESSAGE (try 'opsbroker --help')``; a subcommand's parser names itself
    (``opsbroker serve: error: ...``). Subparsers are of this class too.
    """

    def error(self, message: str) -> NoReturn:
        line = " ".join(message.split())
        self.exit(EXIT_USAGE, f"{self.prog}: error: {line} (try '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="opsbroker", description="A sandboxed remote-operations broker for AI agent tools."
    )
    subparsers = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser
    )
    for name in SUBCOMMANDS:
        importlib.import_module(name).add_parser(subparsers)
    for subparser in subparsers.choices.values():
        subparser.set_defaults(subcommand_parser=subparser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``opsbroker`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # reported by the subcommand's parser, which names the subcommand
        args.subcommand_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        status: int = args.handler(args)
    except KeyboardInterrupt:
        print(f"opsbroker {args.command}: interrupted", file=sys.stderr, flush=True)
        return 130
    except Exception as exc:  # the promise: one line, never a traceback
        message = " ".join(f"unexpected {type(exc).__name__}: {exc}".split())
        print(f"opsbroker {args.command}: {message}", file=sys.stderr, flush=True)
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
