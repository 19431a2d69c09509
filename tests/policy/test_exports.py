"""The public names this part adds are exported, sorted, and exist."""

from __future__ import annotations

import broker
import operations

POLICY_NAMES = {
    "AuditPolicy",
    "AuditSink",
    "EnvPolicy",
    "ExecPolicy",
    "GuardedBackend",
    "Policy",
    "PolicyEnforcer",
    "PolicyError",
    "SandboxPolicy",
    "CommandEnvCache",
    "build_command_env",
    "glob_matches",
    "load_policy",
}
BROKER_NAMES = {
    "AuditError",
    "AuditLog",
    "AuditUnavailable",
    "Enforcement",
    "Sandbox",
    "SandboxUnavailable",
    "landlock_abi",
    "verify_files",
}


def test_operations_exports_the_policy_names() -> None:
    assert set(operations.__all__) >= POLICY_NAMES
    assert all(hasattr(operations, name) for name in operations.__all__)


def test_broker_exports() -> None:
    assert set(broker.__all__) >= BROKER_NAMES
    assert broker.__all__ == sorted(broker.__all__, key=lambda n: (n[0].islower(), n))
    public = {name for name in vars(broker) if not name.startswith("_")}
    assert set(broker.__all__) == public - {"annotations"}
