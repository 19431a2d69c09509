"""SPIFFE IDs: the identity a fleet's client certificate carries, and the list a broker admits.

A SPIFFE ID is ``spiffe://TRUST-DOMAIN/PATH`` (spiffe/spiffe ``standards/SPIFFE-ID.md``): the
trust domain is lower-case letters, digits, ``.``, ``-`` and ``_``; the path is ``/``-separated
segments of letters, digits, ``.``, ``-`` and ``_``, none empty, ``.`` or ``..``; no port, user,
query or fragment; at most 2048 bytes. An X.509-SVID carries its ID as the certificate's one URI
SAN, and a workload's ID has a path (Kubernetes: ``spiffe://cluster.local/ns/NS/sa/ACCOUNT``).

An allow-list entry is either a whole ID (that workload only) or ``spiffe://TRUST-DOMAIN`` (every
workload of that domain). The ID is compared exactly as parsed: no case folding of the path, no
percent-decoding (the characters allowed leave nothing to decode).

Pure data, no I/O: the gRPC and REST front-ends both decide through :class:`SpiffeAllowList`.
"""

from __future__ import annotations

import string
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_ID_BYTES", "SCHEME", "SpiffeAllowList", "SpiffeId", "parse_spiffe_id"]

SCHEME: Final = "spiffe://"
MAX_ID_BYTES: Final = 2048  # the spec's limit for a whole ID (URI SAN libraries agree on it)

_TRUST_DOMAIN_CHARS: Final = frozenset(string.ascii_lowercase + string.digits + ".-_")
_SEGMENT_CHARS: Final = frozenset(string.ascii_letters + string.digits + ".-_")


@dataclass(frozen=True, slots=True)
class SpiffeId:
    """A parsed SPIFFE ID; ``str()`` gives it back as written."""

    trust_domain: str
    path: str
    """``""`` for a trust domain's own ID, else ``/``-led (``/ns/agents/sa/router``)."""

    def __str__(self) -> str:
        return f"{SCHEME}{self.trust_domain}{self.path}"


def parse_spiffe_id(text: str) -> SpiffeId:
    """Parse ``text`` as a SPIFFE ID (a trust domain alone, ``spiffe://example.org``, included).

    Raises:
        ValueError: ``text`` is not a SPIFFE ID; the message says which rule it breaks.
    """
    if len(text.encode("utf-8", "surrogatepass")) > MAX_ID_BYTES:
        raise ValueError(f"is longer than {MAX_ID_BYTES} bytes")
    if not text.startswith(SCHEME):
        raise ValueError(f"does not start with {SCHEME!r}")
    rest = text[len(SCHEME) :]
    domain, slash, path = rest.partition("/")
    if not domain:
        raise ValueError("has no trust domain (spiffe://TRUST-DOMAIN/PATH)")
    bad = sorted(set(domain) - _TRUST_DOMAIN_CHARS)
    if bad:
        raise ValueError(
            f"trust domain {domain!r} holds {''.join(bad)!r}: only lower-case letters, digits, "
            "'.', '-' and '_' (no port, user or upper case)"
        )
    if not slash:
        return SpiffeId(domain, "")
    for segment in path.split("/"):
        if segment in ("", ".", ".."):
            raise ValueError(f"path segment {segment!r} is not allowed (empty, '.' or '..')")
        bad = sorted(set(segment) - _SEGMENT_CHARS)
        if bad:
            raise ValueError(
                f"path segment {segment!r} holds {''.join(bad)!r}: only letters, digits, '.', "
                "'-' and '_' (no query, fragment or percent-encoding)"
            )
    return SpiffeId(domain, "/" + path)


@dataclass(frozen=True, slots=True)
class SpiffeAllowList:
    """The SPIFFE IDs a broker admits: whole IDs, and trust domains admitting all their IDs."""

    entries: tuple[SpiffeId, ...]

    @classmethod
    def parse(cls, entries: Iterable[str]) -> SpiffeAllowList:
        """The list of ``entries`` (``spiffe://DOMAIN/PATH`` or ``spiffe://DOMAIN``).

        Raises:
            ValueError: an entry is not a SPIFFE ID; the message names it and the fix.
        """
        parsed = []
        for entry in entries:
            try:
                parsed.append(parse_spiffe_id(entry))
            except ValueError as exc:
                raise ValueError(
                    f"{entry!r} is not a SPIFFE ID: it {exc}; write spiffe://TRUST-DOMAIN/PATH "
                    "for one workload or spiffe://TRUST-DOMAIN for all of a domain"
                ) from None
        return cls(tuple(parsed))

    def admits(self, spiffe_id: SpiffeId) -> bool:
        """Whether ``spiffe_id`` is listed, or its trust domain is."""
        return any(
            entry.trust_domain == spiffe_id.trust_domain and entry.path in ("", spiffe_id.path)
            for entry in self.entries
        )

    def __str__(self) -> str:
        return ", ".join(str(entry) for entry in self.entries)
