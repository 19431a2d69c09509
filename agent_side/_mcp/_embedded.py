"""A broker core on a root, behind its policy and audit log, in this process.

The same enforcement ``opsbroker serve`` builds (:meth:`broker.Enforcement.start`, then
:meth:`~broker.Enforcement.wrap` around :class:`broker.Broker`): the default policy unless one is
given, the Landlock sandbox when the policy asks for it, one audit line per call, recorded with
transport ``mcp``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from broker import Broker, Enforcement
from operations import Backend, load_policy

__all__ = ["EMBEDDED_PRINCIPAL", "MCP_TRANSPORT", "embedded_broker"]

MCP_TRANSPORT = "mcp"
"""The audit log's ``transport`` for calls that came through MCP."""

EMBEDDED_PRINCIPAL = "local"
"""Who calls an embedded broker: the user who started it (as on the broker's Unix socket)."""


@asynccontextmanager
async def embedded_broker(
    root: str | Path,
    *,
    policy: str | Path | None = None,
    audit_log: str | Path | None = None,
    principal: str = EMBEDDED_PRINCIPAL,
) -> AsyncIterator[Backend]:
    """Open the broker core on ``root`` under ``policy`` (a TOML file; default: the safe policy).

    Yields the guarded backend; on exit the core's commands are killed and the audit log closed.

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
            guarded = enforcement.wrap(core, principal=principal, transport=MCP_TRANSPORT)
            try:
                yield guarded
            finally:
                await guarded.aclose()
        finally:
            await core.aclose()
    finally:
        enforcement.close()
