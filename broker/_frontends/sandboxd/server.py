"""Serving the sandboxd surface: ProcessService (with ``grpc.health.v1``) and the REST API.

:class:`SandboxdServer` is started by :class:`broker.BrokerServer` when the config names
``sandboxd_grpc`` or ``sandboxd_http`` addresses, with the broker's backend, policy, audit,
token table and TLS (one :class:`~broker._tls.ServerTLS` for both listeners and our own gRPC), so
a sandboxd caller meets exactly what a caller of our own gRPC meets.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import grpc
import grpc.aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opsbroker.sandboxd import process_pb2_grpc as pb_grpc

from operations import Backend, InvalidArgument

from ..._auth import TokenTable
from ..._guard import Enforcement
from ..._tls import MutualTLS, ServerTLS
from .._grpcauth import AuthenticatedServer
from .._http import bind, http_server
from ._auth import SandboxdAuthenticator
from .files import FilesApp
from .process import SERVICE_NAME, ProcessServicer

__all__ = ["HEALTH_METHODS", "SandboxdServer"]

HEALTH_METHODS = ("/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch")


class SandboxdServer:
    """The sandboxd front-end of one broker.

    Args:
        backend: the broker's backend.
        tokens: the token table callers authenticate with.
        enforcement: the broker's policy and audit.
        health_without_token: let ``grpc.health.v1`` answer without a token (HTTP
            ``/v1/health`` never needs one).
        tls: serve both listeners over TLS (mutual when it has a client CA).
        mtls: who a client certificate names, when ``tls`` is mutual (default: any the CA
            signed, by its SPIFFE ID or common name).
    """

    def __init__(
        self,
        backend: Backend,
        tokens: TokenTable | None,
        *,
        enforcement: Enforcement | None = None,
        health_without_token: bool = False,
        tls: ServerTLS | None = None,
        mtls: MutualTLS | None = None,
    ) -> None:
        self._backend = backend
        self._tokens = tokens
        self._tls = tls
        self._mtls = (mtls or MutualTLS()) if tls is not None and tls.mutual else None
        self._enforcement = enforcement
        self._health_public = health_without_token
        self._grpc: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self._http: Any = None
        self._http_task: asyncio.Task[None] | None = None
        self.app = FilesApp(backend, tokens, enforcement=enforcement, mtls=self._mtls)
        self.grpc_addresses: list[str] = []
        self.http_addresses: list[str] = []

    async def start(self, grpc_addresses: Sequence[str], http_addresses: Sequence[str]) -> None:
        """Listen on every address.

        Raises:
            InvalidArgument: an address cannot be listened on.
        """
        if grpc_addresses:
            await self._start_grpc(grpc_addresses)
        if http_addresses:
            sockets = []
            try:
                for address in http_addresses:
                    try:
                        sockets.append(bind(address))
                    except OSError as exc:
                        raise InvalidArgument(
                            "serve", address, f"cannot listen: {exc.strerror or exc}"
                        ) from None
            except BaseException:
                for sock in sockets:
                    sock.close()
                raise
            for sock in sockets:
                host, port = sock.getsockname()[:2]
                self.http_addresses.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
            self._http = http_server(self.app, None if self._tls is None else self._tls.context)
            # The sockets listen already: connections wait in their backlog until uvicorn runs.
            self._http_task = asyncio.create_task(self._http.serve(sockets=sockets))

    async def _start_grpc(self, addresses: Sequence[str]) -> None:
        credentials = None if self._tls is None else self._tls.credentials
        authenticator = SandboxdAuthenticator(
            self._tokens,
            mtls=self._mtls,
            public_methods=HEALTH_METHODS if self._health_public else (),
            enforcement=self._enforcement,
        )
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        authenticated: Any = AuthenticatedServer(server, authenticator)
        servicer = ProcessServicer(self._backend, enforcement=self._enforcement)
        pb_grpc.add_ProcessServiceServicer_to_server(servicer, authenticated)  # type: ignore[no-untyped-call]
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, authenticated)
        for address in addresses:
            try:
                if credentials is not None:
                    port = server.add_secure_port(address, credentials)
                else:
                    port = server.add_insecure_port(address)
            except RuntimeError as exc:
                reason = str(exc).split(";")[0]
                raise InvalidArgument("serve", address, f"cannot listen: {reason}") from None
            self.grpc_addresses.append(f"{address.rsplit(':', 1)[0]}:{port}")
        await server.start()
        self._grpc = server
        for service in ("", SERVICE_NAME):
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)

    async def stop(self, grace: float) -> None:
        """Stop serving: health says NOT_SERVING, Start streams are cancelled (their trees
        killed), running requests get ``grace`` seconds. Idempotent."""
        self.app.ready = False
        server, self._grpc = self._grpc, None
        if server is not None:
            if self._health is not None:
                await self._health.enter_graceful_shutdown()
            await server.stop(grace)
        task, self._http_task = self._http_task, None
        if task is not None and self._http is not None:
            self._http.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await task
