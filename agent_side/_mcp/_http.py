"""MCP over Streamable HTTP: the SDK's stateless transport behind an Origin check and a token.

Every request to :data:`MCP_PATH` passes :class:`HttpGate` first:

- **Origin** (DNS rebinding): a request with an ``Origin`` header is refused (403) unless the
  origin is a loopback one (``http(s)://localhost``, ``127.0.0.0/8``, ``[::1]``, any port) or
  listed in ``allowed_origins``. A request without one (a non-browser client) passes.
- **Bearer token**: ``Authorization: Bearer TOKEN`` must name a principal in the token table,
  the one gRPC uses (:class:`broker.TokenTable`); otherwise 401, and the refusal is audited
  when an audit log is configured. The principal reaches the call (:func:`request_principal`).

Then the SDK's transport runs in **stateless** mode: a fresh transport and server per HTTP
request, no session id, no event store, so nothing one client sent or received is held where
another's request could reach it. The server is the broker's HTTP server
(:func:`broker.http_server`: a deadline for each request's headers, no Nagle delay) on a socket
bound by :func:`broker.bind_http`.

**Cancellation.** A stateless server has no session to find a running call in when the
client's ``notifications/cancelled`` arrives in a request of its own, so the gate keeps the
running ``tools/call`` requests by principal and id and cancels the one named, from the same
principal only (a token cannot cancel another principal's calls). The cancellation reaches the
backend's ``exec``, which kills the command's process tree, as over stdio.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

import anyio
import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from broker import TokenTable, http_server

from .._tool import AgentTool
from ._server import ToolsFor, build_server

__all__ = [
    "MCP_PATH",
    "HttpGate",
    "HttpServer",
    "origin_allowed",
    "request_peer",
    "request_principal",
    "serve_http",
]

MCP_PATH = "/mcp"
"""The endpoint: ``http://HOST:PORT/mcp``."""

MAX_BODY_BYTES = 16 * 1024 * 1024
"""The largest request body read, as the stdio limit on one line: room for a large ``write``."""

SHUTDOWN_GRACE_S = 5  # at SIGINT/SIGTERM, for running calls to finish before they are cancelled

_PRINCIPAL = "opsbroker.principal"  # the ASGI scope keys the gate sets for the server
_PEER = "opsbroker.peer"

Refused = Callable[[str, str | None], None]
"""Called with the reason and the peer of each request refused for its credentials."""


def origin_allowed(origin: str, allowed: Iterable[str] = ()) -> bool:
    """Whether a browser page at ``origin`` may call: a loopback origin, or one in ``allowed``
    (compared without case and without a trailing ``/``)."""
    wanted = origin.strip().rstrip("/").lower()
    if wanted in {item.strip().rstrip("/").lower() for item in allowed}:
        return True
    try:
        parts = urlsplit(wanted)
        parts.port  # noqa: B018 (raises ValueError for a port that is no number)
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or parts.path or parts.query or parts.username:
        return False
    host = parts.hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def request_principal(ctx: ServerRequestContext[Any]) -> str | None:
    """The principal :class:`HttpGate` let this request in as (``None`` outside HTTP)."""
    request = ctx.request
    scope = getattr(request, "scope", None)
    return scope.get(_PRINCIPAL) if isinstance(scope, dict) else None


def request_peer(ctx: ServerRequestContext[Any]) -> str | None:
    """``HOST:PORT`` of the client that sent this request (``None`` outside HTTP)."""
    scope = getattr(ctx.request, "scope", None)
    return scope.get(_PEER) if isinstance(scope, dict) else None


def _peer(scope: Scope) -> str | None:
    client = scope.get("client")
    return None if not client else f"{client[0]}:{client[1]}"


async def _refuse(
    send: Send, status: int, message: str, headers: Sequence[tuple[bytes, bytes]]
) -> None:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": types.INVALID_REQUEST, "message": message}}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class HttpGate:
    """ASGI middleware: the path, the Origin and the bearer token, before ``app`` sees a request."""

    def __init__(
        self,
        app: ASGIApp,
        tokens: TokenTable,
        *,
        allowed_origins: Iterable[str] = (),
        refused: Refused | None = None,
    ) -> None:
        self._app = app
        self._tokens = tokens
        self._origins = tuple(allowed_origins)
        self._refused = refused
        # The tools/call requests running now, by (principal, JSON-RPC id): in stateless mode the
        # notifications/cancelled for one arrives in a request of its own, and is applied here.
        self._running: dict[tuple[str, str | int], set[anyio.CancelScope]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        if scope["path"].rstrip("/") != MCP_PATH:
            await _refuse(send, 404, f"no MCP endpoint at {scope['path']!r}; use {MCP_PATH}", ())
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if origin is not None and not origin_allowed(origin, self._origins):
            await _refuse(
                send,
                403,
                f"Origin {origin!r} is not allowed: only loopback origins, or those given "
                "with --http-allow-origin (opsbroker mcp) or --mcp-allow-origin (opsbroker serve)",
                (),
            )
            return
        scheme, _, token = headers.get("authorization", "").partition(" ")
        principal = (
            self._tokens.principal(token.strip()) if scheme.lower() == "bearer" and token else None
        )
        if principal is None:
            peer = _peer(scope)
            if self._refused is not None:
                self._refused("missing or unknown credentials", peer)
            await _refuse(
                send,
                401,
                "missing or unknown bearer token (send 'Authorization: Bearer TOKEN', a token "
                "from the broker's tokens file)",
                ((b"www-authenticate", b'Bearer realm="opsbroker"'),),
            )
            return
        scope[_PRINCIPAL] = principal
        scope[_PEER] = _peer(scope)
        body = await _body(receive, MAX_BODY_BYTES)
        if body is None:
            await _refuse(
                send, 413, f"request body over {MAX_BODY_BYTES} bytes; it was not read", ()
            )
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        method, request_id = _call_of(body)
        if method == "notifications/cancelled" and request_id is not None:
            for running in self._running.get((principal, request_id), ()):
                running.cancel()
        if method != "tools/call" or request_id is None:
            await self._app(scope, replay, send)
            return
        key = (principal, request_id)
        with anyio.CancelScope() as running:
            self._running.setdefault(key, set()).add(running)
            try:
                await self._app(scope, replay, send)
            finally:
                self._running[key].discard(running)
                if not self._running[key]:
                    del self._running[key]


async def _body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or ``None`` once it is over ``limit`` bytes."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return bytes(body)
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body", False):
            return bytes(body)


def _call_of(body: bytes) -> tuple[str | None, str | int | None]:
    """The method of a single JSON-RPC message, and the id it is or cancels (else ``None``)."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None, None
    if not isinstance(value, dict) or not isinstance(value.get("method"), str):
        return None, None
    method = value["method"]
    params = value.get("params")
    found = (
        params.get("requestId")
        if method == "notifications/cancelled" and isinstance(params, dict)
        else value.get("id")
    )
    if isinstance(found, bool) or not isinstance(found, str | int):
        return method, None
    return method, found


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{MCP_PATH}"


class HttpServer:
    """MCP over Streamable HTTP on one listening socket, from :meth:`serve` to :meth:`shutdown`."""

    def __init__(
        self,
        tools: Sequence[AgentTool[Any, Any]],
        sock: socket.socket,
        tokens: TokenTable,
        *,
        tools_for: ToolsFor | None = None,
        allowed_origins: Iterable[str] = (),
        refused: Refused | None = None,
        handle_signals: bool = True,
        grace: float = SHUTDOWN_GRACE_S,
    ) -> None:
        self.url = _url(sock)
        """The endpoint: ``http://HOST:PORT/mcp``."""
        self._sock = sock
        self._manager = StreamableHTTPSessionManager(
            build_server(tools, tools_for=tools_for),
            stateless=True,
            max_request_body_size=MAX_BODY_BYTES,
        )
        app = HttpGate(
            self._manager.handle_request, tokens, allowed_origins=allowed_origins, refused=refused
        )
        self._server = http_server(app, grace=grace, handle_signals=handle_signals)

    async def serve(self, ready: Callable[[str], None] | None = None) -> None:
        """Serve until :meth:`shutdown` (or, with ``handle_signals``, SIGINT or SIGTERM);
        ``ready`` is called with :attr:`url` once requests are accepted."""
        async with self._manager.run():
            if ready is not None:
                ready(self.url)
            await self._server.serve(sockets=[self._sock])

    def shutdown(self) -> None:
        """Stop accepting; running calls get the grace period, then are cancelled."""
        self._server.should_exit = True


async def serve_http(
    tools: Sequence[AgentTool[Any, Any]],
    sock: socket.socket,
    tokens: TokenTable,
    *,
    tools_for: ToolsFor | None = None,
    allowed_origins: Iterable[str] = (),
    refused: Refused | None = None,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve ``tools`` over Streamable HTTP on ``sock`` until SIGINT or SIGTERM.

    ``ready`` is called with the endpoint's URL once it accepts requests.
    """
    server = HttpServer(
        tools,
        sock,
        tokens,
        tools_for=tools_for,
        allowed_origins=allowed_origins,
        refused=refused,
    )
    await server.serve(ready)
