"""TLS for the broker's TCP listeners: one set of files, and one rule for who a client is.

:class:`ServerTLS` reads ``tls_cert``, ``tls_key`` and ``tls_client_ca`` (``BrokerConfig``,
``opsbroker serve --tls-*``) once and gives each kind of listener what it takes: gRPC server
credentials (our gRPC, sandboxd's ProcessService) and an :class:`ssl.SSLContext` (sandboxd's REST
API under uvicorn). With a client CA the TLS is mutual: gRPC refuses a client without a
certificate in the handshake (grpcio has no "ask, but do not require"); the REST listener asks
for one, verifies any it gets, and lets the app refuse a request without one with a 401 that says
what to send, audited like every refusal.

:class:`MutualTLS` decides who a verified client certificate names, for every front-end:

- its SPIFFE ID (the certificate's one ``spiffe://`` URI SAN), as the principal itself;
- else ``cert:<common name>``;
- with an allow-list (``tls_client_spiffe_ids``), only a SPIFFE ID the list admits gets in: a
  certificate without one is refused (Unauthenticated), one with an ID not listed is refused by
  policy (PolicyDenied), and the audit line of that refusal names the ID.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import grpc

from operations import InvalidArgument, PolicyDenied, Unauthenticated

from ._spiffe import SCHEME, SpiffeAllowList, parse_spiffe_id

__all__ = ["ALLOW_RULE", "ClientCertificate", "MutualTLS", "ServerTLS"]

ALLOW_RULE: Final = "tls_client_spiffe_ids"
"""The config key (and the rule a refusal names) of the SPIFFE ID allow-list."""

NO_CERTIFICATE: Final = (
    "this broker requires a client certificate (mutual TLS): connect with a certificate and key "
    "signed by its tls_client_ca"
)


@dataclass(frozen=True, slots=True)
class ClientCertificate:
    """What the broker reads from a verified client certificate."""

    common_name: str
    uris: tuple[str, ...]
    """The certificate's URI SANs, in order."""

    @classmethod
    def from_auth_context(cls, auth: Mapping[str, Iterable[bytes]]) -> ClientCertificate | None:
        """From a gRPC call's ``auth_context()``; ``None`` when the peer sent no certificate."""
        if not auth.get("x509_pem_cert"):
            return None

        def texts(key: str) -> tuple[str, ...]:
            return tuple(bytes(v).decode("utf-8", "replace") for v in auth.get(key) or ())

        names = texts("x509_common_name")
        return cls(names[0] if names else "", texts("peer_uri"))

    @classmethod
    def from_peercert(cls, peercert: Mapping[str, Any] | None) -> ClientCertificate | None:
        """From :meth:`ssl.SSLSocket.getpeercert`; ``None`` when the peer sent no certificate."""
        if not peercert:
            return None
        common = [
            value
            for rdn in peercert.get("subject", ())
            for key, value in rdn
            if key == "commonName"
        ]
        uris = tuple(value for kind, value in peercert.get("subjectAltName", ()) if kind == "URI")
        return cls(common[0] if common else "", uris)

    @property
    def spiffe_uri(self) -> str | None:
        """The first URI SAN that claims to be a SPIFFE ID (as written, before any check)."""
        return next((uri for uri in self.uris if uri.startswith(SCHEME)), None)


@dataclass(frozen=True, slots=True)
class MutualTLS:
    """Who a verified client certificate names, and whether that one may call.

    Args:
        allow: the SPIFFE IDs and trust domains admitted; ``None`` admits every certificate the
            client CA signed.
    """

    allow: SpiffeAllowList | None = None

    def principal(self, certificate: ClientCertificate | None, op: str) -> str:
        """The principal ``certificate`` names: its SPIFFE ID, else ``cert:<common name>``.

        Raises:
            Unauthenticated: there is no certificate; or it names no one (no SPIFFE ID and no
                common name, or no SPIFFE ID while an allow-list is set); or its SPIFFE URI
                SAN is malformed or not the only URI SAN.
            PolicyDenied: its SPIFFE ID is not in the allow-list (rule :data:`ALLOW_RULE`).
        """
        if certificate is None:
            raise Unauthenticated(op, None, NO_CERTIFICATE)
        uri = certificate.spiffe_uri
        if uri is None:
            if self.allow is not None:
                raise Unauthenticated(
                    op,
                    None,
                    "the client certificate has no SPIFFE ID (a URI SAN spiffe://TRUST-DOMAIN/"
                    f"PATH), and this broker admits only {self.allow}",
                )
            if not certificate.common_name:
                raise Unauthenticated(
                    op, None, "the client certificate names no one: no SPIFFE ID, no common name"
                )
            return f"cert:{certificate.common_name}"
        if len(certificate.uris) != 1:
            raise Unauthenticated(
                op,
                None,
                f"the client certificate has {len(certificate.uris)} URI SANs; an X.509-SVID "
                "has exactly one, its SPIFFE ID",
            )
        try:
            spiffe_id = parse_spiffe_id(uri)
        except ValueError as exc:
            raise Unauthenticated(
                op, None, f"the client certificate's SPIFFE ID {uri[:256]!r} {exc}"
            ) from None
        if not spiffe_id.path:
            raise Unauthenticated(
                op, None, f"the client certificate's SPIFFE ID {uri!r} names a trust domain, "
                "not a workload (it has no path)"
            )  # fmt: skip
        if self.allow is not None and not self.allow.admits(spiffe_id):
            raise PolicyDenied(
                op,
                None,
                f"SPIFFE ID {uri!r} is not admitted ({ALLOW_RULE}: {self.allow})",
                rule=ALLOW_RULE,
            )
        return str(spiffe_id)


@dataclass(frozen=True, slots=True)
class ServerTLS:
    """The broker's TLS files, loaded: credentials for gRPC, a context for the REST API."""

    credentials: grpc.ServerCredentials
    context: ssl.SSLContext
    mutual: bool

    @classmethod
    def load(cls, cert: Path | None, key: Path | None, client_ca: Path | None) -> ServerTLS | None:
        """Read the files; ``None`` when no TLS is configured.

        Raises:
            InvalidArgument: only one of ``cert`` and ``key`` is given, or ``client_ca`` without
                them, or a file cannot be read or does not hold what it should.
        """
        if cert is None and key is None:
            if client_ca is not None:
                raise InvalidArgument("serve", None, "tls_client_ca needs tls_cert and tls_key")
            return None
        if cert is None or key is None:
            raise InvalidArgument("serve", None, "TLS needs both tls_cert and tls_key")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidArgument(
                "serve", str(cert), f"cannot load the TLS certificate with key {str(key)!r}: {exc}"
            ) from None
        ca = None
        if client_ca is not None:
            try:
                context.load_verify_locations(cafile=client_ca)
                ca = client_ca.read_bytes()
            except (OSError, ssl.SSLError) as exc:
                raise InvalidArgument(
                    "serve", str(client_ca), f"cannot load tls_client_ca: {exc}"
                ) from None
            context.verify_mode = ssl.CERT_OPTIONAL  # the app refuses, with a message
        credentials = grpc.ssl_server_credentials(
            [(key.read_bytes(), cert.read_bytes())],
            root_certificates=ca,
            require_client_auth=ca is not None,
        )
        return cls(credentials, context, ca is not None)
