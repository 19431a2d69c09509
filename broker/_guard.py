"""Policy, audit and sandbox for a running broker, and the per-connection guard around the core.

A front-end does not enforce anything itself. At start the broker builds one
:class:`Enforcement` from its policy; each connection then gets
``enforcement.wrap(core, principal=..., transport="grpc", peer=...)``, a
:class:`~operations.GuardedBackend` that checks the policy and writes the audit line for every
call, so gRPC, SSH and in-process callers meet exactly the same rules.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from operations import Backend, GuardedBackend, Policy

from ._audit import AuditError, AuditLog
from ._landlock import Sandbox, sandbox_status

__all__ = ["MAX_GUARDS", "Enforcement", "peer_address"]

MAX_GUARDS = 1024  # cached (principal, peer) guards of one broker; cleared when full


def peer_address(peer: str | None) -> str | None:
    """A peer as every transport writes it in the audit log: ``HOST:PORT`` (IPv6 in brackets),
    ``unix:PATH``; gRPC's ``ipv4:`` / ``ipv6:`` scheme prefixes are dropped."""
    if not peer:
        return None
    for scheme in ("ipv4:", "ipv6:"):
        if peer.startswith(scheme):
            peer = peer.removeprefix(scheme)
            break
    else:
        host, sep, port = peer.rpartition(":")
        if sep and ":" in host and not host.startswith("["):  # bare IPv6 from a socket
            peer = f"[{host}]:{port}"
    return peer


class Enforcement:
    """What one broker enforces: its :class:`~operations.Policy`, its audit log (if any) and
    the Landlock sandbox for commands (if the policy asks for one and the kernel has it).

    Build it with :meth:`start`; close it when the broker stops.
    """

    def __init__(
        self,
        policy: Policy,
        audit: AuditLog | None,
        sandbox: Sandbox | None,
        status: dict[str, object],
    ) -> None:
        self.policy = policy
        self.audit = audit
        self.sandbox = sandbox
        self.sandbox_status = status
        self._guards: dict[tuple[int, str, str, str | None], GuardedBackend] = {}

    @classmethod
    def start(
        cls, policy: Policy, root: str, *, audit_log: str | os.PathLike[str] | None = None
    ) -> Enforcement:
        """Check the policy can be honoured here, open the audit log, prepare the sandbox.

        Raises:
            SandboxUnavailable: ``sandbox.mode = "landlock"`` on a kernel without Landlock; the
                broker must not start (fail closed).
            AuditError: the audit log cannot be opened or continued.
        """
        status = sandbox_status(policy)
        audit = None
        if audit_log is not None:
            audit = AuditLog(
                Path(audit_log),
                fsync=policy.audit.fsync,
                rotate_bytes=policy.audit.rotate_bytes,
            )
        try:
            sandbox = Sandbox.for_policy(policy, root)
        except BaseException:
            if audit is not None:
                audit.close()
            raise
        return cls(policy, audit, sandbox, status)

    @property
    def sandbox_active(self) -> bool:
        """Whether commands run in the policy's Landlock sandbox."""
        return bool(self.sandbox_status.get("active"))

    def capabilities(self) -> dict[str, object]:
        """For the broker's capabilities: sandbox mode, whether it is active, the Landlock ABI,
        signal scoping, and whether operations are audited."""
        return {
            "sandbox": dict(self.sandbox_status),
            "audit": self.audit is not None,
            "audit_fail_closed": self.policy.audit.fail_closed,
            "read_only": self.policy.read_only,
            "exec": self.policy.exec.enabled,
        }

    def wrap(
        self, core: Backend, *, principal: str, transport: str, peer: str | None = None
    ) -> GuardedBackend:
        """The backend one connection uses: ``core`` behind this policy and audit log.

        The core decides on the path it opens (a link named ``notes`` pointing at ``.env`` is
        refused like ``.env``, however it is swapped); closing the guard leaves ``core`` open.
        """
        return GuardedBackend(
            core,
            self.policy,
            audit=self.audit,
            principal=principal,
            transport=transport,
            peer=peer_address(peer),
            close_inner=False,
        )

    def guard(
        self, core: Backend, *, principal: str, transport: str, peer: str | None = None
    ) -> GuardedBackend:
        """:meth:`wrap`, kept for the next call of the same caller (a front-end whose calls
        are not tied to a connection, like gRPC): at most :data:`MAX_GUARDS` are kept."""
        key = (id(core), principal, transport, peer)
        guard = self._guards.get(key)
        if guard is None:
            if len(self._guards) >= MAX_GUARDS:
                self._guards.clear()
            guard = self._guards[key] = self.wrap(
                core, principal=principal, transport=transport, peer=peer
            )
        return guard

    def record_refusal(
        self,
        op: str,
        reason: str,
        *,
        principal: str | None,
        transport: str,
        peer: str | None = None,
        code: str = "unauthenticated",
    ) -> None:
        """Audit a refusal made before any backend call (e.g. a front-end rejecting
        credentials), so the log holds every refusal. Never pass the credential itself.

        A write failure is ignored here: the caller is refusing anyway.
        """
        if self.audit is None:
            return
        event = {
            "op": op,
            "principal": principal,
            "transport": transport,
            "peer": peer_address(peer),
            "path": None,
            "resolved": None,
            "decision": "deny",
            "reason": reason,
            "code": code,
        }
        with contextlib.suppress(AuditError):
            self.audit.record(event)

    def close(self) -> None:
        """Close the audit log and release the sandbox. Idempotent."""
        if self.audit is not None:
            self.audit.close()
        if self.sandbox is not None:
            self.sandbox.close()
