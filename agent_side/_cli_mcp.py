"""``opsbroker mcp``: the built-in tools as an MCP server on stdin and stdout.

``opsbroker mcp --root DIR`` runs an embedded broker on DIR, under ``--policy`` (default: the safe
policy) and ``--audit-log``, exactly as ``opsbroker serve`` enforces them.
``opsbroker mcp grpc://HOST:PORT --token-file F`` and ``opsbroker mcp ssh://USER@HOST:PORT`` run
the tools on a remote broker (its policy and audit apply there), with the options of
``opsbroker call``. Nothing but MCP is written to stdout; failures to start are one line on
stderr, with the statuses of :mod:`agent_side._cli`.
"""

from __future__ import annotations

import argparse
import posixpath
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from ._cli import (
    CliError,
    add_backend_arguments,
    one_line_usage_errors,
    open_tools,
    run_command,
)
from ._mcp import embedded_broker, serve_stdio
from ._tool import AgentTool

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "mcp",
        help="serve the built-in tools to an MCP client over stdio",
        description=(
            "Serve the eight built-in tools (read, write, edit, ls, find, grep, bash, powershell) "
            "over MCP on stdin/stdout: on an embedded broker with --root DIR, or on the remote "
            "broker at URL (grpc:// with --token-file, ssh:// with --identity/--known-hosts)."
        ),
        epilog="example: opsbroker mcp --root ~/project --audit-log ~/project-audit.jsonl",
    )
    one_line_usage_errors(parser, "mcp")
    add_backend_arguments(parser, url_required=False)
    embedded = parser.add_argument_group("embedded broker (instead of URL)")
    embedded.add_argument("--root", type=Path, metavar="DIR", help="the workspace root directory")
    embedded.add_argument(
        "--policy", type=Path, metavar="FILE", help="a policy TOML file (default: the safe policy)"
    )
    embedded.add_argument(
        "--audit-log", type=Path, metavar="FILE", help="append one hash-chained JSON line per call"
    )
    parser.set_defaults(handler=run)


def _check(args: argparse.Namespace) -> None:
    if (args.url is None) == (args.root is None):
        raise CliError("give either --root DIR (an embedded broker) or a broker URL, not both")
    if args.url is None:
        return
    if args.policy is not None or args.audit_log is not None:
        raise CliError("--policy and --audit-log apply to --root; a remote broker has its own")
    if args.url.split(":", 1)[0].lower() == "local":
        raise CliError(
            f"{args.url!r} would run without a policy; use --root DIR for an embedded broker"
        )


@asynccontextmanager
async def _tools(args: argparse.Namespace) -> AsyncIterator[list[AgentTool[Any, Any]]]:
    from .tools import create_all_tools

    if args.url is not None:
        async with open_tools(args) as (_backend, tools):
            yield tools
        return
    if not args.root.is_dir():
        raise CliError(f"--root {str(args.root)!r} is not a directory")
    try:
        opened = embedded_broker(args.root, policy=args.policy, audit_log=args.audit_log)
        backend = await opened.__aenter__()
    except Exception as exc:  # a policy, sandbox or audit log the broker cannot honour
        raise CliError(str(exc)) from None
    try:
        root = backend.root
        cwd = root if args.cwd is None else posixpath.normpath(posixpath.join(root, args.cwd))
        yield create_all_tools(cwd=cwd, operations=backend)
    finally:
        await opened.__aexit__(None, None, None)


async def _serve(args: argparse.Namespace) -> int:
    _check(args)
    async with _tools(args) as tools:
        await serve_stdio(tools)
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command("mcp", lambda: _serve(args))
