"""What ``opsbroker call`` and ``opsbroker run`` share: backend options, input parsing, failures.

Both commands open a backend with :func:`agent_side.connect`, build the eight built-in tools over
it (``create_all_tools(cwd=backend.root, operations=backend)``) and hand tool calls to
:func:`agent_side.loop.execute_tool_calls`: the same path a model's calls take.

Every failure the user can cause (a bad URL, an unreachable broker, a refused token, invalid JSON,
an unknown tool, a missing file) ends the command with one line on stderr and a non-zero status,
never a traceback. Exit statuses: :data:`EXIT_OK`, :data:`EXIT_TOOL_ERROR`, :data:`EXIT_USAGE`,
:data:`EXIT_BACKEND`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import posixpath
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NoReturn

from opsbroker import eventloop

from operations import Backend, OpsError

from ._connect import connect
from ._tool import AgentTool

__all__ = [
    "EXIT_BACKEND",
    "EXIT_OK",
    "EXIT_TOOL_ERROR",
    "EXIT_USAGE",
    "CliError",
    "add_backend_arguments",
    "one_line_usage_errors",
    "open_tools",
    "read_input",
    "read_json",
    "run_command",
    "write_out",
]

EXIT_OK = 0
"""Every tool call succeeded."""
EXIT_TOOL_ERROR = 1
"""A tool call ran and its result is an error (the model would see ``isError: true``)."""
EXIT_USAGE = 2
"""The input was bad: arguments, JSON, file, URL, tool name (argparse uses 2 as well)."""
EXIT_BACKEND = 3
"""The backend could not be opened or used: unreachable, credentials refused."""

_GRPC_SCHEMES = ("grpc", "grpcs", "grpc+unix")

CONNECT_TIMEOUT_S = 10.0
"""Default wait for a backend to answer at connect: a dead broker fails the command quickly."""


class CliError(Exception):
    """A failure to report as one line on stderr, with an exit status."""

    def __init__(self, message: str, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.status = status


def add_backend_arguments(parser: argparse.ArgumentParser, *, url_required: bool = True) -> None:
    """The URL and the options that say how to reach and authenticate to a backend."""
    parser.add_argument(
        "url",
        metavar="URL",
        nargs=None if url_required else "?",
        help="backend: memory:, local:/ROOT, grpc://HOST:PORT, grpc+unix:///SOCK, ssh://USER@HOST:PORT",
    )
    auth = parser.add_argument_group("authentication")
    auth.add_argument("--token", help="gRPC bearer token (default: $OPSBROKER_TOKEN)")
    auth.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help="read the gRPC token from FILE (its first 'TOKEN [PRINCIPAL]' line)",
    )
    auth.add_argument(
        "--identity",
        "-i",
        type=Path,
        action="append",
        metavar="KEY",
        help="SSH private key (repeatable)",
    )
    auth.add_argument(
        "--known-hosts",
        type=Path,
        metavar="FILE",
        help="SSH known_hosts file that must vouch for the broker (default: ~/.ssh/known_hosts)",
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=CONNECT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"give up if the backend does not answer within SECONDS (default {CONNECT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--cwd",
        metavar="DIR",
        help="working directory of the tools, relative to the workspace root (default: the root)",
    )


def one_line_usage_errors(parser: argparse.ArgumentParser, name: str) -> None:
    """Make ``parser`` report a usage error (a missing or unknown argument) in one line too."""

    def error(message: str) -> NoReturn:
        _fail(name, f"{message} (see 'opsbroker {name} --help')")
        raise SystemExit(EXIT_USAGE)

    parser.error = error  # type: ignore[method-assign]


def read_json(text: str, what: str) -> Any:
    """Parse ``text`` as JSON, or fail with a message that says where it is broken."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(
            f"invalid JSON in {what}: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None


def read_input(source: str, what: str) -> str:
    """The text of ``source``: a file path, or ``-`` for stdin."""
    if source == "-":
        return sys.stdin.read()
    try:
        return Path(source).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError(f"{what} {source!r} does not exist") from None
    except IsADirectoryError:
        raise CliError(f"{what} {source!r} is a directory, not a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {what} {source!r}: {exc}") from None


def _token_from_file(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise CliError(f"cannot read the token file {str(path)!r}: {exc.strerror}") from None
    for line in lines:
        fields = line.split()
        if fields and not fields[0].startswith("#"):
            return fields[0]
    raise CliError(f"the token file {str(path)!r} holds no token")


def _connect_options(args: argparse.Namespace) -> dict[str, Any]:
    scheme = args.url.split(":", 1)[0].lower()
    options: dict[str, Any] = {}
    if args.token is not None or args.token_file is not None:
        if scheme not in _GRPC_SCHEMES:
            raise CliError(f"--token and --token-file apply to grpc URLs, not {scheme + ':'!r}")
        options["token"] = (
            args.token if args.token is not None else _token_from_file(args.token_file)
        )
    if args.identity or args.known_hosts is not None:
        if scheme != "ssh":
            raise CliError(f"--identity and --known-hosts apply to ssh URLs, not {scheme + ':'!r}")
        if args.identity:
            for key in args.identity:
                if not key.is_file():
                    raise CliError(f"SSH key {str(key)!r} does not exist")
                if _is_public_key(key):
                    private = str(key.with_suffix("")) if key.suffix == ".pub" else "its pair"
                    raise CliError(
                        f"SSH key {str(key)!r} is a public key; --identity takes the private "
                        f"key ({private!r}, whose public half the broker's authorized_keys holds)"
                    )
            options["client_keys"] = [str(key) for key in args.identity]
        if args.known_hosts is not None:
            if not args.known_hosts.is_file():
                raise CliError(f"known_hosts file {str(args.known_hosts)!r} does not exist")
            options["known_hosts"] = str(args.known_hosts)
    return options


def _is_public_key(path: Path) -> bool:
    """Whether ``path`` holds an OpenSSH public key line (``ssh-ed25519 AAAA... comment``)."""
    try:
        with path.open("rb") as f:
            start = f.read(64)
    except OSError:
        return False
    return start.startswith((b"ssh-", b"ecdsa-", b"sk-")) or start.startswith(
        b"---- BEGIN SSH2 PUBLIC KEY"
    )


@asynccontextmanager
async def open_backend(args: argparse.Namespace) -> AsyncIterator[Backend]:
    """Open the backend ``args.url`` names (bounded by ``--connect-timeout``); close it on exit."""
    try:
        backend = connect(args.url, **_connect_options(args))
    except OpsError as exc:
        raise CliError(str(exc)) from None
    try:
        await asyncio.wait_for(backend.__aenter__(), args.connect_timeout)
    except TimeoutError:
        await backend.aclose()
        raise CliError(
            f"connect {args.url!r}: no answer within {args.connect_timeout:g} seconds; "
            "is the broker running there?",
            EXIT_BACKEND,
        ) from None
    except OpsError as exc:
        await backend.aclose()
        # Named by the URL the user typed, not the backend's target (host:port) for it.
        message = f"connect {args.url!r}: {exc.reason}" if exc.op == "connect" else str(exc)
        raise CliError(message, EXIT_BACKEND) from None
    except OSError as exc:
        await backend.aclose()
        raise CliError(f"connect {args.url!r}: {exc}", EXIT_BACKEND) from None
    try:
        yield backend
    finally:
        await backend.aclose()


@asynccontextmanager
async def open_tools(
    args: argparse.Namespace,
) -> AsyncIterator[tuple[Backend, list[AgentTool[Any, Any]]]]:
    """Open the backend ``args.url`` names and the built-in tools over it; close it on exit."""
    from .tools import create_all_tools

    async with open_backend(args) as backend:
        root = backend.root
        cwd = root if args.cwd is None else posixpath.normpath(posixpath.join(root, args.cwd))
        yield backend, create_all_tools(cwd=cwd, operations=backend)


def run_command(name: str, main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run ``main`` on a fresh event loop; report any failure as one line prefixed ``name``."""
    try:
        return eventloop.run(main())
    except eventloop.EventLoopError as exc:
        _fail(name, str(exc))
        return EXIT_USAGE
    except CliError as exc:
        _fail(name, str(exc))
        return exc.status
    except OpsError as exc:
        _fail(name, str(exc))
        return EXIT_BACKEND
    except KeyboardInterrupt:
        _fail(name, "interrupted")
        return 130
    except BrokenPipeError:
        # Only a write outside write_out gets here, so the outcome is unknown: never success.
        _discard_stdout()
        _fail(name, "stdout was closed before the result was written")
        return EXIT_TOOL_ERROR
    except Exception as exc:  # the promise: a one-line message, never a traceback
        _fail(name, f"unexpected {type(exc).__name__}: {exc}")
        return EXIT_BACKEND


def write_out(text: str) -> None:
    """Write ``text`` to stdout now. A closed stdout (``| head -1``) is not an error: the rest
    of the output is discarded, and the command still runs to its end and its real status."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        _discard_stdout()


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so what is still buffered or written later goes nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _fail(name: str, message: str) -> None:
    line = " ".join(message.split())  # one line, whatever the message held
    print(f"opsbroker {name}: {line}", file=sys.stderr, flush=True)
