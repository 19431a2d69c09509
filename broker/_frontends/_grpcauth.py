"""Authentication for the gRPC front-end: who a caller is, decided before any method runs.

:class:`AuthenticatedServer` applies one :class:`Authenticator` to every method of every service on
the server (health and reflection included); a refused call is answered UNAUTHENTICATED, audited, and
performs nothing. For our own service it also answers an undecodable request INVALID_ARGUMENT.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, TypeAlias

import grpc
import grpc.aio
from opsbroker.v1.codec import passing_bytes

from operations import OpsError, PolicyDenied, Unauthenticated

from .._auth import TokenTable
from .._guard import Enforcement
from .._tls import ClientCertificate, MutualTLS
from ._grpcwire import SERVICE_NAME, Undecodable, abort_with, current_principal, tolerant
from ._service import METHODS

__all__ = ["AuthenticatedServer", "Authenticator"]


class Authenticator:
    """Decides who a caller is, or that it may not call at all.

    - a Unix-socket peer is ``local`` (the socket file's permissions are the access control);
    - with mutual TLS (``mtls``), the verified client certificate decides: its SPIFFE ID, else
      ``cert:<common name>``, under the SPIFFE allow-list if one is set (:mod:`broker._tls`);
    - otherwise a token (:meth:`token_principal`) must name a principal in ``tokens``.

    Methods in ``public_methods`` (e.g. the health check, if so configured) need no credentials.
    """

    def __init__(
        self,
        tokens: TokenTable | None,
        *,
        mtls: MutualTLS | None = None,
        public_methods: Iterable[str] = (),
        enforcement: Enforcement | None = None,
    ) -> None:
        self._tokens = tokens
        self._mtls = mtls
        self._public = frozenset(public_methods)
        self.enforcement = enforcement

    def principal(self, method: str, context: grpc.aio.ServicerContext[Any, Any]) -> str | None:
        """The caller's principal, or ``None`` when its token is missing or unknown.

        Raises:
            Unauthenticated: mutual TLS is on and the client certificate names no one.
            PolicyDenied: mutual TLS is on and the certificate's SPIFFE ID is not admitted.
        """
        peer = context.peer() or ""
        if peer.startswith("unix:"):
            return "local"
        if self._mtls is not None:
            certificate = ClientCertificate.from_auth_context(context.auth_context())
            try:
                return self._mtls.principal(certificate, "authenticate")
            except OpsError:
                if method in self._public:
                    return "anonymous"
                raise
        found = self.token_principal(context)
        if found is None and method in self._public:
            return "anonymous"
        return found

    refusal = "missing or unknown bearer token (send 'authorization: Bearer TOKEN')"
    """What a caller without a known token is told."""
    transport = "grpc"
    """The transport its refusals are audited under."""

    def refused(
        self, op: str, error: OpsError, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        """Audit the refusal of a call to ``op`` (a denied SPIFFE ID is named as the principal)."""
        if self.enforcement is None:
            return
        presented = None
        if isinstance(error, PolicyDenied):
            certificate = ClientCertificate.from_auth_context(context.auth_context())
            presented = None if certificate is None else certificate.spiffe_uri
        self.enforcement.record_refusal(
            op,
            "missing or unknown credentials" if self._mtls is None else error.reason,
            principal=presented,
            transport=self.transport,
            peer=context.peer(),
            code=error.code,
        )

    def token_principal(self, context: grpc.aio.ServicerContext[Any, Any]) -> str | None:
        """The principal of the ``authorization: Bearer TOKEN`` header, or ``None``."""
        if self._tokens is None:
            return None
        for key, value in context.invocation_metadata() or ():
            if key == "authorization" and isinstance(value, str):
                scheme, _, token = value.partition(" ")
                if scheme.lower() == "bearer":
                    return self._tokens.principal(token.strip())
        return None


_Behaviour = Callable[..., Any]
_Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


class AuthenticatedServer:
    """Where every service of the server is added: each method handler is wrapped with the
    :class:`Authenticator` as it is registered.

    Pass it where a ``grpc.aio.Server`` is expected by ``add_XServicer_to_server`` functions
    (ours, health, reflection). Wrapping at registration instead of in a server interceptor
    keeps the per-call cost down (an interceptor is one more coroutine and lookup per call, and
    it turns off gRPC's registered-method fast path); a method added straight to the server,
    around this, would be unauthenticated, so :class:`~broker.BrokerServer` adds none.
    """

    def __init__(self, server: grpc.aio.Server, authenticator: Authenticator) -> None:
        self.server = server
        self._auth = authenticator

    def add_generic_rpc_handlers(self, handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        self.server.add_generic_rpc_handlers(
            tuple(_GuardedGeneric(handler, self._auth) for handler in handlers)
        )

    def add_registered_method_handlers(self, service: str, handlers: dict[str, _Handler]) -> None:
        guarded = {
            name: _guard(handler, f"/{service}/{name}", self._auth)
            for name, handler in handlers.items()
        }
        self.server.add_registered_method_handlers(service, guarded)


class _GuardedGeneric(grpc.GenericRpcHandler):
    """A generic handler whose method handlers authenticate first (wrapped once per method)."""

    def __init__(self, inner: grpc.GenericRpcHandler, authenticator: Authenticator) -> None:
        self._inner = inner
        self._auth = authenticator
        self._cache: dict[str, tuple[_Handler, _Handler]] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> _Handler | None:
        handler = self._inner.service(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        cached = self._cache.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        guarded = _guard(handler, method, self._auth)
        self._cache[method] = (handler, guarded)
        return guarded


def _guard(handler: _Handler, method: str, auth: Authenticator) -> _Handler:
    """``handler`` with the caller authenticated before its behaviour runs; for our own service,
    an undecodable request message is answered with INVALID_ARGUMENT."""
    name = method.rsplit("/", 1)[-1]
    ours = method.startswith(f"/{SERVICE_NAME}/")
    op = METHODS[name].op if ours and name in METHODS else name

    def refusal(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> OpsError | None:
        """Why this call may not run (audited), or ``None`` once the principal is set."""
        try:
            principal = auth.principal(method, context)
        except OpsError as exc:
            auth.refused(op, exc, context)
            return exc
        if principal is None:
            error = Unauthenticated(op, None, auth.refusal)
            auth.refused(op, error, context)
            return error
        current_principal.set(principal)
        if isinstance(request, Undecodable):
            return request.error(op)
        return None

    def wrap(inner: _Behaviour) -> _Behaviour:
        if inspect.isasyncgenfunction(inner):

            async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
                error = refusal(request, context)
                if error is not None:
                    await abort_with(context, error)
                async for response in inner(request, context):
                    yield response

            return stream

        async def call(request: Any, context: Any) -> Any:
            error = refusal(request, context)
            if error is not None:
                await abort_with(context, error)
            return await inner(request, context)

        return call

    kwargs = {
        "request_deserializer": (
            tolerant(handler.request_deserializer) if ours else handler.request_deserializer
        ),
        "response_serializer": (
            passing_bytes(handler.response_serializer)
            if ours and handler.response_serializer is not None
            else handler.response_serializer
        ),
    }
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(wrap(handler.unary_unary), **kwargs)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(wrap(handler.unary_stream), **kwargs)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(wrap(handler.stream_unary), **kwargs)
    assert handler.stream_stream is not None
    return grpc.stream_stream_rpc_method_handler(wrap(handler.stream_stream), **kwargs)
