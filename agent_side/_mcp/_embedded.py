"""A broker core on a root, behind its policy and audit log, in this process.

The same enforcement ``opsbroker serve`` builds (:meth:`broker.Enforcement.start`, then
:meth:`~broker.Enforcement.wrap` around :class:`broker.Broker`): the default policy unless one is
given, the Landlock sandbox when the policy asks for it, one audit line per call, recorded with
transport ``mcp``. Over stdio one caller uses it (``local``); over HTTP each token's principal
gets its own guarded backend (:meth:`Embedded.backend`), so the audit log names who called.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from broker import Broker, Enforcement
from operations import Backend, load_policy

__all__ = ["EMBEDDED_PRINCIPAL", "MCP_TRANSPORT", "Embedded", "embedded_broker", "open_embedded"]

MCP_TRANSPORT = "mcp"
"""The audit log's ``transport`` for calls that came through MCP."""

EMBEDDED_PRINCIPAL = "local"
"""Who calls an embedded broker: the user who started it (as on the broker's Unix socket)."""


@dataclass(frozen=True, slots=True)
class Embedded:
    """An open broker core and the enforcement around it: one guarded backend per caller."""

    core: Broker
    enforcement: Enforcement

    def backend(self, principal: str = EMBEDDED_PRINCIPAL, peer: str | None = None) -> Backend:
        """The core behind the policy and audit log, for calls by ``principal`` from ``peer``."""
        return self.enforcement.guard(
            self.core, principal=principal, transport=MCP_TRANSPORT, peer=peer
        )


@asynccontextmanager
async def open_embedded(
    root: str | Path,
    *,
    policy: str | Path | None = None,
    audit_log: str | Path | None = None,
) -> AsyncIterator[Embedded]:
    """Open the broker core on ``root`` under ``policy`` (a TOML file; default: the safe policy).

    On exit the core's commands are killed and the audit log closed.

    Raises:
        PolicyError: the policy file cannot be read or is invalid.
        SandboxUnavailable: the policy requires Landlock and this kernel has none.
        AuditError: the audit log cannot be opened or continued.
        OpsError: ``root`` is not a directory the broker can open.
    """
    path = str(root)
    enforcement = Enforcement.start(load_policy(policy), path, audit_log=audit_log)
    try:
        core = Broker(path, sandbox=enforcement.sandbox)
        try:
            yield Embedded(core, enforcement)
        finally:
            await core.aclose()
    finally:
        enforcement.close()


@asynccontextmanager
async def embedded_broker(
    root: str | Path,
    *,
    policy: str | Path | None = None,
    audit_log: str | Path | None = None,
    principal: str = EMBEDDED_PRINCIPAL,
) -> AsyncIterator[Backend]:
    """:func:`open_embedded`, yielding the one guarded backend ``principal`` calls through."""
    async with open_embedded(root, policy=policy, audit_log=audit_log) as embedded:
        guarded = embedded.enforcement.wrap(
            embedded.core, principal=principal, transport=MCP_TRANSPORT
        )
        try:
            yield guarded
        finally:
            await guarded.aclose()
