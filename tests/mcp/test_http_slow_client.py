"""A client that sends its request headers a byte at a time cannot hold an MCP HTTP connection:
both ways to serve MCP over HTTP run on the broker's HTTP server, which answers 408 once
:data:`HEADER_TIMEOUT_S` has passed without a whole request head, and serves on afterwards."""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from broker._frontends._http import HEADER_TIMEOUT_S

from ._http import KINDS, http_server

MAX_TRICKLE = 200  # header lines sent, one every 0.2 s: 40 s, far past the deadline


def _trickle(host: str, port: int) -> tuple[bytes, float]:
    """Send a request line, then one header line at a time until the server answers."""
    with socket.create_connection((host, port), timeout=30) as sock:
        started = time.monotonic()
        sock.sendall(b"POST /mcp HTTP/1.1\r\n")
        for _ in range(MAX_TRICKLE):
            try:
                sock.sendall(b"X-Slow: y\r\n")
            except OSError:
                break
            sock.settimeout(0.2)
            with contextlib.suppress(TimeoutError):
                if answer := sock.recv(256):
                    return answer, time.monotonic() - started
        return b"", time.monotonic() - started


@pytest.mark.parametrize("kind", KINDS)
def test_a_slow_request_head_gets_408_and_the_server_serves_on(tmp_path: Path, kind: str) -> None:
    with http_server(tmp_path, "--root", str(tmp_path), kind=kind) as url:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        answer, took = _trickle(parts.hostname, parts.port)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert HEADER_TIMEOUT_S - 1 < took < HEADER_TIMEOUT_S + 15, took
        with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
            sock.sendall(b"GET /mcp HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert sock.recv(64).startswith(b"HTTP/1.1 "), "the server no longer answers"
