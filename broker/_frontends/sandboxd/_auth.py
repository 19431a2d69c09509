"""Who a sandboxd caller is: the token it sends, looked up in the broker's token table.

The agent-sandbox router strips ``Authorization``, so the token travels in a header it forwards:
``X-Opsbroker-Token: TOKEN`` over HTTP, metadata ``x-opsbroker-token`` over gRPC.
``Authorization: Bearer TOKEN`` is accepted too, when it arrives. Tokens and principals come from
the same :class:`~broker.TokenTable` (tokens file) as our own gRPC front-end.

With mutual TLS on (``tls_client_ca``) the client certificate decides instead, by the one rule
of :class:`broker._tls.MutualTLS` (the SPIFFE ID and its allow-list); a token is not asked for.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import grpc.aio

from ..._auth import TokenTable
from .._grpcauth import Authenticator

__all__ = ["TOKEN_HEADER", "SandboxdAuthenticator", "token_principal"]

TOKEN_HEADER: Final = "x-opsbroker-token"
"""The header (HTTP, any case) and metadata key (gRPC) that carries the token."""

REFUSAL: Final = (
    f"missing or unknown token (send '{TOKEN_HEADER}: TOKEN', a token from the broker's "
    "tokens file)"
)


def token_principal(tokens: TokenTable | None, pairs: Iterable[tuple[str, Any]]) -> str | None:
    """The principal named by the first token in ``pairs`` (lower-case header names and their
    values): ``x-opsbroker-token``, else ``authorization: Bearer``; ``None`` when none does."""
    if tokens is None:
        return None
    bearer = None
    for key, value in pairs:
        if not isinstance(value, str):
            continue
        if key == TOKEN_HEADER:
            return tokens.principal(value.strip())
        if key == "authorization" and bearer is None:
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer":
                bearer = token.strip()
    return None if bearer is None else tokens.principal(bearer)


class SandboxdAuthenticator(Authenticator):
    """Our gRPC :class:`~broker._frontends._grpcauth.Authenticator` (mutual TLS decides when it
    is on), with the token also (and first) taken from ``x-opsbroker-token``."""

    refusal = REFUSAL
    transport = "sandboxd"

    def token_principal(self, context: grpc.aio.ServicerContext[Any, Any]) -> str | None:
        return token_principal(self._tokens, context.invocation_metadata() or ())
