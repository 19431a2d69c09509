"""``opsbroker``: the command line, composed from the subcommands of both halves.

The broker's subcommands (``serve``, ``audit``) and the agent side's (``call``, ``run``) each live
in their own module. They meet here, above both packages, so ``broker`` imports nothing from
``agent_side``. To add a subcommand, write a module with ``add_parser(subparsers)`` (which
registers the parser and sets ``handler=run``), import it below and add it to
:data:`SUBCOMMANDS`. Agent-side front-ends of ``serve`` (``--mcp-http``) are handed to its
parser as :data:`SERVE_EXTENSIONS`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import metadata
from types import ModuleType
from typing import NoReturn

from opsbroker import grpccore

grpccore.configure()  # grpc reads its settings as it is first imported: before the two halves

from agent_side import _cli_call, _cli_mcp, _cli_processes, _cli_run  # noqa: E402
from broker import _cli_audit, _cli_serve  # noqa: E402

__all__ = ["SERVE_EXTENSIONS", "SUBCOMMANDS", "OneLineParser", "main", "version"]

EXIT_USAGE = 2  # argparse's status for a usage error, kept

SUBCOMMANDS: tuple[ModuleType, ...] = (
    _cli_audit,
    _cli_call,
    _cli_run,
    _cli_mcp,
    _cli_processes,
)

SERVE_EXTENSIONS: tuple[_cli_serve.ServeExtension, ...] = (_cli_mcp.SERVE_MCP_HTTP,)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (no usage block), status 2.

    ``opsbroker: error: MESSAGE (try 'opsbroker --help')``; a subcommand's parser names itself
    (``opsbroker serve: error: ...``). Subparsers are of this class too.
    """

    def error(self, message: str) -> NoReturn:
        line = " ".join(message.split())
        self.exit(EXIT_USAGE, f"{self.prog}: error: {line} (try '{self.prog} --help')\n")


def version() -> str:
    """The installed opsbroker's version (``0+unknown`` from a source tree never installed)."""
    try:
        return metadata.version("opsbroker")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="opsbroker", description="A sandboxed remote-operations broker for AI agent tools."
    )
    parser.add_argument("--version", action="version", version=f"opsbroker {version()}")
    subparsers = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser
    )
    _cli_serve.add_parser(subparsers, SERVE_EXTENSIONS)
    for module in SUBCOMMANDS:
        module.add_parser(subparsers)
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
