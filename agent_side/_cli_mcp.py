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
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.server import ServerRequestContext

from broker import Frontend, TokenTable, bind_http, default_token_file, is_loopback_address
from operations import OpsError

from ._cli import (
    CliError,
    add_backend_arguments,
    one_line_usage_errors,
    open_tools,
    run_command,
)
from ._mcp import EMBEDDED_PRINCIPAL, MCP_TRANSPORT, ToolsFor, open_embedded, serve_stdio
from ._mcp._frontend import McpHttpFrontend
from ._mcp._http import Refused, request_peer, request_principal, serve_http
from ._tool import AgentTool

__all__ = ["SERVE_MCP_HTTP", "add_parser", "run"]


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
    http = parser.add_argument_group("Streamable HTTP (instead of stdio)")
    http.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve MCP at http://HOST:PORT/mcp (loopback; port 0 picks a free one)",
    )
    http.add_argument(
        "--http-token-file",
        type=Path,
        metavar="FILE",
        help=(
            "the bearer tokens HTTP clients must send, 'TOKEN PRINCIPAL' lines, mode 0600 "
            "(default: the broker's tokens file, created with one token if missing)"
        ),
    )
    http.add_argument(
        "--http-allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="also accept browser requests from ORIGIN (repeatable; loopback origins always are)",
    )
    http.add_argument(
        "--http-allow-network",
        action="store_true",
        help="allow a --http address that is not loopback (needs --http-token-file)",
    )
    parser.set_defaults(handler=run)


def _check(args: argparse.Namespace) -> None:
    if (args.url is None) == (args.root is None):
        raise CliError("give either --root DIR (an embedded broker) or a broker URL, not both")
    if args.http is None:
        if args.http_token_file or args.http_allow_origin or args.http_allow_network:
            raise CliError(
                "--http-token-file, --http-allow-origin and --http-allow-network need --http"
            )
    elif not is_loopback_address(args.http):
        if not args.http_allow_network:
            raise CliError(
                f"--http {args.http!r} is not a loopback address; add --http-allow-network "
                "(and --http-token-file) to serve the network, or listen on 127.0.0.1"
            )
        if args.http_token_file is None:
            raise CliError(
                f"--http {args.http!r} is reachable from the network; give the tokens "
                "explicitly with --http-token-file FILE"
            )
    if args.url is None:
        return
    if args.policy is not None or args.audit_log is not None:
        raise CliError("--policy and --audit-log apply to --root; a remote broker has its own")
    if args.url.split(":", 1)[0].lower() == "local":
        raise CliError(
            f"{args.url!r} would run without a policy; use --root DIR for an embedded broker"
        )


@dataclass
class _Served:
    """The tools to serve; over HTTP, the tools of one principal and the audit of refusals."""

    tools: list[AgentTool[Any, Any]]
    tools_for: ToolsFor | None = None
    refused: Refused | None = None


@asynccontextmanager
async def _tools(args: argparse.Namespace) -> AsyncIterator[_Served]:
    from .tools import create_all_tools

    if args.url is not None:
        async with open_tools(args) as (_backend, tools):
            yield _Served(tools)
        return
    if not args.root.is_dir():
        raise CliError(f"--root {str(args.root)!r} is not a directory")
    try:
        opened = open_embedded(args.root, policy=args.policy, audit_log=args.audit_log)
        embedded = await opened.__aenter__()
    except Exception as exc:  # a policy, sandbox or audit log the broker cannot honour
        raise CliError(str(exc)) from None
    try:
        root = embedded.core.root
        cwd = root if args.cwd is None else posixpath.normpath(posixpath.join(root, args.cwd))

        def tools_for(ctx: ServerRequestContext[Any]) -> list[AgentTool[Any, Any]]:
            backend = embedded.backend(
                request_principal(ctx) or EMBEDDED_PRINCIPAL, request_peer(ctx)
            )
            return create_all_tools(cwd=cwd, operations=backend)

        def refused(reason: str, peer: str | None) -> None:
            embedded.enforcement.record_refusal(
                "mcp", reason, principal=None, transport=MCP_TRANSPORT, peer=peer
            )

        yield _Served(create_all_tools(cwd=cwd, operations=embedded.backend()), tools_for, refused)
    finally:
        await opened.__aexit__(None, None, None)


def _tokens(args: argparse.Namespace) -> TokenTable:
    path = args.http_token_file or default_token_file(args.root)
    try:
        return (
            TokenTable.load_or_create(path)
            if args.http_token_file is None
            else TokenTable.load(path)
        )
    except (OSError, OpsError) as exc:
        raise CliError(f"--http-token-file {str(path)!r}: {exc}") from None


def _announce(token_file: Path) -> Callable[[str], None]:
    def ready(url: str) -> None:
        print(
            f"opsbroker mcp: MCP over Streamable HTTP at {url} "
            f"(send 'Authorization: Bearer TOKEN', a token from {token_file})",
            file=sys.stderr,
            flush=True,
        )

    return ready


async def _serve(args: argparse.Namespace) -> int:
    _check(args)
    if args.http is None:
        async with _tools(args) as served:
            await serve_stdio(served.tools)
        return 0
    tokens = _tokens(args)
    try:
        sock = bind_http(args.http)
    except OSError as exc:
        raise CliError(f"--http {args.http!r}: cannot listen: {exc.strerror or exc}") from None
    with sock:
        async with _tools(args) as served:
            await serve_http(
                served.tools,
                sock,
                tokens,
                tools_for=served.tools_for,
                allowed_origins=args.http_allow_origin,
                refused=served.refused,
                ready=_announce(tokens.path or default_token_file(args.root)),
            )
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command("mcp", lambda: _serve(args))


class _ServeMcpHttp:
    """``opsbroker serve --mcp-http ADDR``: MCP over Streamable HTTP beside gRPC and SSH."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("MCP over Streamable HTTP")
        group.add_argument(
            "--mcp-http",
            action="append",
            metavar="HOST:PORT",
            help=(
                "also serve the built-in tools over MCP at http://HOST:PORT/mcp (repeatable; "
                "the broker's tokens as bearer tokens; not loopback: needs --token-file)"
            ),
        )
        group.add_argument(
            "--mcp-allow-origin",
            action="append",
            default=[],
            metavar="ORIGIN",
            help="also accept browser requests from ORIGIN (loopback origins always are)",
        )

    def frontends(self, args: argparse.Namespace) -> list[Frontend]:
        if args.mcp_allow_origin and not args.mcp_http:
            raise ValueError("--mcp-allow-origin needs --mcp-http")
        return [
            McpHttpFrontend(address, allowed_origins=args.mcp_allow_origin)
            for address in args.mcp_http or ()
        ]


SERVE_MCP_HTTP = _ServeMcpHttp()
"""The ``serve`` options of MCP over HTTP, composed in by :mod:`opsbroker.cli`."""
