"""The sandboxd Filesystem & Runtime REST API as an ASGI app, over the backend's file operations.

``GET/HEAD/PUT/DELETE /v1/files/{path}``, ``GET /v1/health`` and ``GET /v1/metadata``, as
``packages/sandboxd/spec/filesystem/v1/filesystem.yaml`` defines them. Every file request is a
call of the backend's operations (``stat``, ``list_dir``, ``read_file`` streamed, ``write_file``
streamed, ``mkdir``, ``remove``) behind the broker's policy and audit as the caller's principal,
so the resolver decides on the path it opens: a ``..`` above the root, an absolute symlink or a
link swapped in mid-request is an escape (403), never a file outside the workspace.

Bodies stream both ways: a GET relays the backend's pieces as the client reads them, a PUT hands
the body to the backend's atomic streamed write as it arrives (a ``multipart/form-data`` body is
unwrapped on the way, :mod:`._multipart`), so a file of any size passes in bounded memory. A PUT
body that pauses longer than ``body_idle_timeout`` is answered 408 and the connection closed;
the partial temp file is discarded, never renamed over the target. The ``mode`` query value is
the file's permission bits (a replaced file keeps its own without one).

Errors are the spec's JSON ``{"code": ..., "message": ...}`` with the status of the one table
(:mod:`._status`); a message names the path as the client sent it (root-relative), never the
broker's own workspace path. Who calls is decided first: a request without a known token
(:mod:`._auth`) is 401, audited, and does nothing; with mutual TLS on, the connection's client
certificate decides instead (:class:`broker._tls.MutualTLS`): none, or one naming no one, is 401,
a SPIFFE ID outside the allow-list is 403, each audited as a deny. ``/v1/health`` alone needs no
credentials (probes send none, and it says nothing but ``ok``).
"""

from __future__ import annotations

import asyncio
import json
import os
import posixpath
import time
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime
from email.utils import formatdate
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from operations import (
    Aborted,
    Backend,
    DirectoryNotEmpty,
    FileStat,
    InvalidArgument,
    OpsError,
    PolicyDenied,
    TooLarge,
    Unauthenticated,
    read_chunks,
    read_small,
    write_chunks,
)

from ..._auth import TokenTable
from ..._guard import Enforcement
from ..._tls import ClientCertificate, MutualTLS
from .._http import PEER_CERTIFICATE
from .._service import STREAM_IDLE_TIMEOUT
from ._auth import REFUSAL, token_principal
from ._multipart import FilePart, boundary_of
from ._paths import files_path, parse_mode, parse_recursive, workspace_path
from ._status import BodyTimeout, public_message, status_of

__all__ = ["METADATA_PREFIX", "READ_CHUNK_BYTES", "WITHHELD_MARKERS", "FilesApp", "metadata_env"]

READ_CHUNK_BYTES: Final = 256 * 1024  # a GET's pieces: few loop passes, little memory

METADATA_PREFIX: Final = "SANDBOX_"
"""Only environment variables with this prefix are served on ``/v1/metadata`` (as sandboxd)."""

WITHHELD_MARKERS: Final = ("TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "KEY")
"""A variable whose name holds one of these is never served, whatever its prefix."""

Refused = Callable[[str, str | None], None]


def metadata_env(environ: Mapping[str, str], prefix: str = METADATA_PREFIX) -> dict[str, str]:
    """The allow-listed, non-secret part of ``environ``: names with ``prefix`` and no
    credential marker."""
    return {
        name: value
        for name, value in sorted(environ.items())
        if name.startswith(prefix) and not any(m in name.upper() for m in WITHHELD_MARKERS)
    }


def _error_response(
    error: OpsError, head: bool = False, root: str = "/", sent: tuple[str, str] | None = None
) -> Response:
    status = status_of(error)
    message = public_message(error, root, sent)
    body = b"" if head else json.dumps({"code": status.code, "message": message}).encode()
    headers = {"connection": "close"} if isinstance(error, BodyTimeout) else None
    return Response(body, status.http, headers=headers, media_type="application/json")


async def _body(receive: Receive, idle: float, path: str) -> AsyncIterator[bytes]:
    """A request's body as it arrives; a body that stalls for ``idle`` seconds is refused."""
    while True:
        try:
            async with asyncio.timeout(idle):
                message = await receive()
        except TimeoutError:
            raise BodyTimeout(
                "write_file", path, f"no body bytes for {idle} s; nothing was written"
            ) from None
        if message["type"] == "http.disconnect":
            raise Aborted("write_file", path, "the client left before the body ended")
        data = message.get("body", b"")
        if data:
            yield data
        if not message.get("more_body", False):
            return


def _json(value: object) -> Response:
    return Response(json.dumps(value).encode(), 200, media_type="application/json")


def _octal(mode: int) -> str:
    return f"{mode & 0o7777:04o}"


def _entry(name: str, info: FileStat) -> dict[str, object]:
    return {
        "name": name,
        "size": info.size,
        "type": "directory" if info.is_directory else "file",
        "modified_at": datetime.fromtimestamp(info.mtime, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "mode": _octal(info.mode),
    }


class FilesApp:
    """The REST API over ``backend``.

    Args:
        backend: what does the work (the broker core, or any ``operations.Backend``).
        tokens: the token table callers authenticate against (``None``: every file request is
            refused).
        enforcement: the broker's policy and audit; each request runs behind it.
        environ: what ``/v1/metadata`` filters (default: the broker's environment, read once).
        body_idle_timeout: seconds a PUT body may pause before it is refused (408) and its
            partial file discarded: the same idle timeout as our own gRPC's client streams.
        mtls: with mutual TLS, who a client certificate names (tokens are then not asked for).
    """

    def __init__(
        self,
        backend: Backend,
        tokens: TokenTable | None,
        *,
        enforcement: Enforcement | None = None,
        environ: Mapping[str, str] | None = None,
        body_idle_timeout: float = STREAM_IDLE_TIMEOUT,
        mtls: MutualTLS | None = None,
    ) -> None:
        self.body_idle_timeout = body_idle_timeout
        self._mtls = mtls
        self._backend = backend
        self._tokens = tokens
        self._enforcement = enforcement
        self._metadata = metadata_env(os.environ if environ is None else environ)
        self._started = time.monotonic()
        self.ready = True

    def _ops(self, principal: str, peer: str | None) -> Backend:
        if self._enforcement is None:
            return self._backend
        return self._enforcement.guard(
            self._backend, principal=principal, transport="sandboxd", peer=peer or ""
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        response = await self._respond(Request(scope, receive))
        await response(scope, receive, send)

    async def _respond(self, request: Request) -> Response:
        scope = request.scope
        raw: bytes = scope.get("raw_path") or scope["path"].encode()
        raw = raw.split(b"?", 1)[0]
        method = request.method
        head = method == "HEAD"
        if raw == b"/v1/health" and method in ("GET", "HEAD"):
            return self._health()
        client = scope.get("client")
        peer = f"{client[0]}:{client[1]}" if client else None
        try:
            principal = self._principal(scope)
        except OpsError as exc:
            if self._enforcement is not None:
                certificate = scope.get("state", {}).get(PEER_CERTIFICATE)
                self._enforcement.record_refusal(
                    f"{method} {raw[:64].decode('latin-1')}",
                    "missing or unknown credentials" if self._mtls is None else exc.reason,
                    principal=(certificate.spiffe_uri if isinstance(exc, PolicyDenied) else None),
                    transport="sandboxd",
                    peer=peer,
                    code=exc.code,
                )
            return _error_response(exc, head)
        sent: str | None = None
        try:
            if raw == b"/v1/metadata" and method in ("GET", "HEAD"):
                return _json({"env": self._metadata})
            if not raw.startswith(b"/v1/files/"):
                return Response(
                    json.dumps(
                        {"code": "NOT_FOUND", "message": f"no endpoint {raw[:256]!r}"}
                    ).encode(),
                    404,
                    media_type="application/json",
                )
            handler = self._HANDLERS.get(method)
            if handler is None:
                return Response(
                    json.dumps(
                        {"code": "METHOD_NOT_ALLOWED", "message": f"{method} is not served here"}
                    ).encode(),
                    405,
                    headers={"allow": "GET, HEAD, PUT, DELETE"},
                    media_type="application/json",
                )
            ops = self._ops(principal, peer)
            sent = files_path(raw, _OPS[method])
            response: Response = await handler(self, ops, request, sent.lstrip("/"))
            return response
        except OpsError as exc:
            root = self._backend.root
            named = None if sent is None else (workspace_path(root, sent), sent)
            return _error_response(exc, head, root, named)

    def _principal(self, scope: Scope) -> str:
        """Who sends this request: its client certificate's principal with mutual TLS, else
        its token's.

        Raises:
            Unauthenticated: no known token; or (mutual TLS) no certificate naming someone.
            PolicyDenied: the certificate's SPIFFE ID is not in the allow-list.
        """
        if self._mtls is not None:
            certificate: ClientCertificate | None = scope.get("state", {}).get(PEER_CERTIFICATE)
            return self._mtls.principal(certificate, "sandboxd")
        principal = token_principal(
            self._tokens, ((k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"])
        )
        if principal is None:
            raise Unauthenticated("sandboxd", None, REFUSAL)
        return principal

    def _health(self) -> Response:
        if not self.ready:
            return Response(
                json.dumps({"code": "UNAVAILABLE", "message": "the broker is stopping"}).encode(),
                503,
                media_type="application/json",
            )
        return _json({"status": "ok", "uptime_seconds": int(time.monotonic() - self._started)})

    async def _get(self, ops: Backend, request: Request, relative: str) -> Response:
        path = workspace_path(ops.root, relative)
        info = await ops.stat(path)
        if info.is_directory:
            return _json(await self._listing(ops, path, relative))
        if info.size <= READ_CHUNK_BYTES:  # one piece: answered whole, with its length
            data = await read_small(ops, path, READ_CHUNK_BYTES)
            if data is not None:
                return Response(data, 200, media_type="application/octet-stream")
        pieces = read_chunks(ops, path, READ_CHUNK_BYTES)
        try:
            first = await anext(pieces, b"")
        except BaseException:
            await pieces.aclose()
            raise

        async def body() -> AsyncIterator[bytes]:
            try:
                if first:
                    yield first
                async for piece in pieces:
                    yield piece
            finally:
                await pieces.aclose()

        return StreamingResponse(body(), 200, media_type="application/octet-stream")

    async def _listing(self, ops: Backend, path: str, relative: str) -> dict[str, object]:
        entries = []
        for entry in await ops.list_dir(path):
            try:
                info = await ops.stat(posixpath.join(path, entry.name))
            except OpsError:
                continue  # vanished, or a link leading out: not listed
            entries.append(_entry(entry.name, info))
        return {"path": "/" + relative, "entries": entries}

    async def _head(self, ops: Backend, request: Request, relative: str) -> Response:
        info = await ops.stat(workspace_path(ops.root, relative))
        headers = {
            "last-modified": formatdate(info.mtime, usegmt=True),
            "x-file-type": "directory" if info.is_directory else "file",
            "x-file-mode": _octal(info.mode),
        }
        if not info.is_directory:
            headers["content-length"] = str(info.size)
        kind = "application/json" if info.is_directory else "application/octet-stream"
        return Response(None, 200, headers=headers, media_type=kind)

    async def _put(self, ops: Backend, request: Request, relative: str) -> Response:
        path = workspace_path(ops.root, relative)
        mode = parse_mode(request.query_params.get("mode"), "write_file", path)
        if not relative or relative.endswith("/"):
            raise InvalidArgument("write_file", path, "target path is a directory")
        parent = posixpath.dirname(path)
        if parent != ops.root.rstrip("/") and parent:
            await ops.mkdir(parent)
        boundary = boundary_of(request.headers.get("content-type", ""))
        limit = self._max_write()

        async def pieces() -> AsyncIterator[bytes]:
            form = FilePart(boundary) if boundary is not None else None
            received = 0
            async for data in _body(request.receive, self.body_idle_timeout, path):
                received += len(data)
                if received > limit:
                    raise TooLarge("write_file", path, f"upload exceeds {limit} bytes")
                if form is None:
                    if data:
                        yield data
                    continue
                for piece in form.feed(data):
                    yield piece
            if form is not None:
                form.finish()

        await write_chunks(ops, path, pieces(), mode=mode)
        return Response(None, 204)

    def _max_write(self) -> int:
        if self._enforcement is None:
            return 1 << 62
        return self._enforcement.policy.max_write_bytes

    async def _delete(self, ops: Backend, request: Request, relative: str) -> Response:
        path = workspace_path(ops.root, relative)
        recursive = parse_recursive(request.query_params.get("recursive"), "remove", path)
        if relative.strip("/") == "":
            if not recursive:
                raise DirectoryNotEmpty(
                    "remove",
                    path,
                    "cannot remove the workspace root; pass recursive=true to clear its contents",
                )
            for entry in await ops.list_dir(path):
                await ops.remove(posixpath.join(path, entry.name), recursive=True)
            return Response(None, 204)
        await ops.lstat(path)  # a missing path is 404 before anything else is said
        await ops.remove(path, recursive=recursive)
        return Response(None, 204)

    _HANDLERS: Final[dict[str, Callable[..., Any]]] = {
        "GET": _get,
        "HEAD": _head,
        "PUT": _put,
        "DELETE": _delete,
    }


_OPS: Final = {"GET": "read_file", "HEAD": "stat", "PUT": "write_file", "DELETE": "remove"}
