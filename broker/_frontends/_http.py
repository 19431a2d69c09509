"""uvicorn for every HTTP front-end (sandboxd's REST API, MCP over HTTP): listening sockets, a
header deadline against slowloris, and no signal handling of its own.

uvicorn (h11) is the HTTP server: a well-kept asyncio server already installed with ``mcp``,
with flow control both ways (a slow reader pauses a GET, a fast PUT pauses reading), a bounded
header size (h11 answers an oversized or malformed request 400 and closes) and an idle
keep-alive timeout. It has no deadline for a request's *headers*, so a client that sends them a
byte at a time would hold a connection forever: :class:`DeadlineProtocol` gives every request
:data:`HEADER_TIMEOUT_S` to arrive, then answers 408 and closes.

Over TLS (the broker's one :class:`~broker._tls.ServerTLS` context), the protocol also reads the
client certificate once per connection, after the handshake, and hands it to every request of
that connection as ``scope["state"][PEER_CERTIFICATE]`` (uvicorn gives an ASGI app no transport).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import ssl
from collections.abc import Iterator
from typing import Any, Final

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

from .._tls import ClientCertificate

__all__ = [
    "HEADER_TIMEOUT_S",
    "MAX_HEADER_BYTES",
    "PEER_CERTIFICATE",
    "DeadlineProtocol",
    "bind",
    "http_server",
]

HEADER_TIMEOUT_S: Final = 10.0  # from connection (or the last response) to a request's headers
MAX_HEADER_BYTES: Final = 64 * 1024  # a request's head, at most (h11 answers 400 beyond)
KEEP_ALIVE_S: Final = 60  # an idle keep-alive connection is closed after this (as sandboxd)
SHUTDOWN_GRACE_S: Final = 5  # at stop, for running requests to finish

PEER_CERTIFICATE: Final = "opsbroker.peer_certificate"
"""The request state key of the connection's :class:`~broker._tls.ClientCertificate` (or None)."""

_TIMEOUT_RESPONSE: Final = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b'content-length: 71\r\n\r\n{"code":"DEADLINE_EXCEEDED","message":"request headers took too long"}\n'
)


class DeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol, with a deadline for each request's headers."""

    header_timeout: float = HEADER_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_for: object = None

    def _arm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._waiting_for = self.cycle
        self._deadline = self.loop.call_later(self.header_timeout, self._expire)

    def _expire(self) -> None:
        self._deadline = None
        if self.cycle is self._waiting_for and not self.transport.is_closing():
            self.transport.write(_TIMEOUT_RESPONSE)
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        _no_delay(transport)
        tls: ssl.SSLObject | None = transport.get_extra_info("ssl_object")
        if tls is not None:  # asyncio calls this after the handshake: the certificate is known
            peer = ClientCertificate.from_peercert(tls.getpeercert())
            self.app_state = {**self.app_state, PEER_CERTIFICATE: peer}  # this connection's
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._deadline is not None and self.cycle is not self._waiting_for:
            self._deadline.cancel()  # a request's headers arrived
            self._deadline = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # the next request on this connection gets its own deadline

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        super().connection_lost(exc)


def _no_delay(transport: asyncio.Transport) -> None:
    """Send each write at once. asyncio sets ``TCP_NODELAY`` only on sockets whose ``proto`` is
    ``IPPROTO_TCP``; ours (from ``socket.create_server``) have 0, so without this a response's
    head and body wait on the client's delayed ACK (about 40 ms a request)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def bind(address: str) -> socket.socket:
    """A listening TCP socket on ``HOST:PORT`` (port 0: a free one).

    Raises:
        OSError: the address cannot be parsed or listened on.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise OSError(f"{address!r} is not HOST:PORT")
    host = host.removeprefix("[").removesuffix("]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, int(port)), family=family)


class _Embedded(uvicorn.Server):
    """uvicorn leaving SIGINT and SIGTERM to the program it runs in: inside the broker, uvicorn's
    own handlers would hold a shutdown signal back until its server had stopped."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def http_server(
    app: ASGIApp,
    tls: ssl.SSLContext | None = None,
    *,
    grace: float = SHUTDOWN_GRACE_S,
    handle_signals: bool = False,
) -> uvicorn.Server:
    """A uvicorn server for ``app`` (call ``serve(sockets=...)``), over TLS with ``tls``.

    Args:
        app: the ASGI application.
        tls: the server's TLS context, or ``None`` for plain HTTP.
        grace: at stop, how long running requests may finish (rounded up to whole seconds).
        handle_signals: whether uvicorn itself stops on SIGINT and SIGTERM (a program that only
            serves this); inside the broker, its own shutdown stops the server.
    """
    config = uvicorn.Config(
        app,
        http=DeadlineProtocol,
        lifespan="off",
        log_level="warning",
        access_log=False,
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=math.ceil(grace),
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        ssl_context_factory=None if tls is None else (lambda _config, _default: tls),
    )
    return uvicorn.Server(config) if handle_signals else _Embedded(config)
