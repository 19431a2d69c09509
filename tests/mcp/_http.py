"""``opsbroker mcp --http`` as a user runs it, and the SDK's Streamable HTTP client on it.

:func:`http_server` starts ``python -m opsbroker mcp ARGS --http 127.0.0.1:0`` with a tokens file
of its own and yields the URL it announces; :func:`http_session` is an initialised SDK client
session on that URL with a bearer token (and any other headers).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.cli._run import REPO, SERVE_READY_S, cli_env

from ._client import CALL_TIMEOUT_S

TOKENS = {"alice-token-0123456789": "alice", "bob-token-9876543210": "bob"}
ALICE, BOB = list(TOKENS)
STOP_S = 15.0  # for the server to exit after SIGTERM


def write_tokens(path: Path) -> Path:
    path.write_text("".join(f"{token} {principal}\n" for token, principal in TOKENS.items()))
    path.chmod(0o600)
    return path


KINDS = ("mcp", "serve")
"""The two ways to serve MCP over HTTP: ``opsbroker mcp --http``, ``opsbroker serve --mcp-http``."""


def _command(kind: str, tokens: Path) -> list[str]:
    if kind == "serve":
        return ["serve", "--grpc", "127.0.0.1:0", "--mcp-http", "127.0.0.1:0", "--token-file"]
    return ["mcp", "--http", "127.0.0.1:0", "--http-token-file"]


def allow_origin_flag(kind: str) -> str:
    return "--mcp-allow-origin" if kind == "serve" else "--http-allow-origin"


@contextmanager
def http_server(tmp_path: Path, *args: str, kind: str = "mcp") -> Iterator[str]:
    """The URL of a fresh ``opsbroker mcp ARGS --http 127.0.0.1:0`` (or ``serve ... --mcp-http``;
    tokens: :data:`TOKENS`)."""
    tokens = write_tokens(tmp_path / f"{kind}-tokens")
    log = tmp_path / f"{kind}-http.out"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "opsbroker", *_command(kind, tokens), str(tokens), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=cli_env(),
            cwd=REPO,
        )
    (tmp_path / f"{kind}-http.pid").write_text(str(process.pid))
    try:
        deadline = time.monotonic() + SERVE_READY_S
        while not (found := re.search(r"http://\S+/mcp", log.read_text())):
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"no URL announced: {log.read_text()!r}"
            time.sleep(0.05)
        yield found.group(0)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_S)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(STOP_S)


def client(token: str | None = ALICE, **headers: str) -> httpx2.AsyncClient:
    """An HTTP client sending ``Authorization: Bearer token`` (none for ``None``) and ``headers``."""
    sent = dict(headers)
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    return create_mcp_http_client(headers=sent, timeout=httpx2.Timeout(CALL_TIMEOUT_S))


@asynccontextmanager
async def http_session(
    url: str, token: str | None = ALICE, **headers: str
) -> AsyncIterator[ClientSession]:
    """An initialised SDK client session over Streamable HTTP on ``url``."""
    async with (
        client(token, **headers) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT_S) as session,
    ):
        await session.initialize()
        yield session
