"""Enforcement: what a broker builds at start (fail closed) and wraps around each connection."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker import _landlock
from broker._audit import AuditError, read_records, verify_files
from broker._guard import Enforcement
from broker._landlock import SandboxUnavailable, landlock_abi
from operations import InMemoryOperations, Policy, PolicyDenied


def test_a_required_sandbox_without_landlock_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(_landlock, "landlock_abi", lambda: 0)
    policy = Policy.from_mapping({"sandbox": {"mode": "landlock"}})
    with pytest.raises(SandboxUnavailable, match="requires Landlock"):
        Enforcement.start(policy, str(tmp_path), audit_log=tmp_path / "audit.log")


def test_a_damaged_audit_log_refuses_to_start(tmp_path: Path) -> None:
    (tmp_path / "audit.log").write_text("not a chain\n")
    with pytest.raises(AuditError, match="damaged"):
        Enforcement.start(Policy(), str(tmp_path), audit_log=tmp_path / "audit.log")


async def test_wrap_checks_and_audits_each_connection(tmp_path: Path) -> None:
    enforcement = Enforcement.start(Policy(), str(tmp_path), audit_log=tmp_path / "audit.log")
    core = InMemoryOperations({"src/a.py": b"x", ".env": b"TOKEN=1"})
    alice = enforcement.wrap(core, principal="alice", transport="grpc", peer="127.0.0.1:9")
    bob = enforcement.wrap(core, principal="bob", transport="ssh")
    assert await alice.read_file(f"{core.root}/src/a.py") == b"x"
    with pytest.raises(PolicyDenied):
        await bob.read_file(f"{core.root}/.env")
    await alice.aclose()  # a connection closing leaves the shared core open
    assert await core.read_file(f"{core.root}/src/a.py") == b"x"
    enforcement.close()
    records = list(read_records([tmp_path / "audit.log"]))
    assert [(r["principal"], r["transport"], r["decision"]) for r in records] == [
        ("alice", "grpc", "allow"),
        ("bob", "ssh", "deny"),
    ]
    assert verify_files([tmp_path / "audit.log"]).ok


def test_symlinks_on_disk_are_resolved(tmp_path: Path) -> None:
    enforcement = Enforcement.start(Policy(), str(tmp_path))
    (tmp_path / ".env").write_text("TOKEN=1")
    os.symlink(".env", tmp_path / "notes")
    guard = enforcement.wrap(InMemoryOperations(root=str(tmp_path)), principal="p", transport="t")
    assert guard._targets(str(tmp_path / "notes")) == ("notes", ".env")


def test_capabilities_report_the_sandbox(tmp_path: Path) -> None:
    policy = Policy.from_mapping({"sandbox": {"mode": "auto"}})
    enforcement = Enforcement.start(policy, str(tmp_path))
    try:
        caps = enforcement.capabilities()
        assert caps["sandbox"] == {
            "mode": "auto",
            "active": landlock_abi() >= 1,
            "landlock_abi": landlock_abi(),
            "signal_scoping": landlock_abi() >= 6,
        }
        assert caps["audit"] is False
        assert (enforcement.sandbox is not None) is (landlock_abi() >= 1)
    finally:
        enforcement.close()
