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


async def test_symlinks_on_disk_are_decided_on_their_target(tmp_path: Path) -> None:
    from broker import Broker

    root = tmp_path / "root"
    root.mkdir()
    (root / ".env").write_text("TOKEN=1")
    os.symlink(".env", root / "notes")
    enforcement = Enforcement.start(Policy(), str(root), audit_log=tmp_path / "audit.log")
    try:
        async with Broker(str(root)) as core:
            guard = enforcement.wrap(core, principal="p", transport="t")
            with pytest.raises(PolicyDenied):
                await guard.read_file(str(root / "notes"))
    finally:
        enforcement.close()
    (record,) = read_records([tmp_path / "audit.log"])
    assert (record["path"], record["resolved"], record["decision"]) == (
        str(root / "notes"),
        ".env",
        "deny",
    )


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


@pytest.mark.parametrize("strategy", ["openat2", "walk"])
async def test_the_gate_is_told_the_path_that_was_opened(tmp_path: Path, strategy: str) -> None:
    """What the core reports to the gate is where the kernel opened the file: the same as
    ``os.path.realpath`` for every in-root spelling, through either spelling of the root."""
    from broker import Broker
    from operations import Gate, PolicyEnforcer

    root = tmp_path / "root"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "a.py").write_text("")
    os.symlink("pkg/a.py", root / "src" / "rel-link")
    os.symlink("..", root / "src" / "up")
    (root / "a" / "sub").mkdir(parents=True)
    (root / "a" / "secret").write_text("")
    os.symlink("a/sub", root / "l")
    alias = tmp_path / "alias"
    os.symlink(root, alias)
    enforcer = PolicyEnforcer(Policy())
    async with Broker(str(alias), resolver=strategy) as core:
        for base in (root, alias):
            for rel in (
                "src/pkg/a.py",
                "src/rel-link",
                "src/up/src/pkg/a.py",
                "src/pkg/../pkg/a.py",
                "l/../secret",  # physically a/secret, lexically secret
            ):
                path = str(base / rel)
                gate = Gate(enforcer, "read_file", path)
                await core.read_file(path, gate=gate)
                assert gate.resolved == _real_relative(path, root), path
            gate = Gate(enforcer, "list_dir", str(base))
            await core.list_dir(str(base), gate=gate)
            assert gate.resolved == ""


def _real_relative(path: str, root: Path) -> str:
    return os.path.relpath(os.path.realpath(path), os.path.realpath(root))


async def test_dotdot_after_a_symlink_is_checked_where_it_lands(tmp_path: Path) -> None:
    from broker import Broker

    (tmp_path / "a" / "sub").mkdir(parents=True)
    (tmp_path / "a" / "secret").write_text("s")
    os.symlink("a/sub", tmp_path / "l")
    enforcement = Enforcement.start(Policy(deny_read=["a/secret"]), str(tmp_path))
    async with Broker(str(tmp_path)) as core:
        guard = enforcement.wrap(core, principal="p", transport="t")
        with pytest.raises(PolicyDenied) as info:
            await guard.read_file(f"{core.root}/l/../secret")
        assert info.value.rule == "deny_read: a/secret"


def test_front_end_refusals_are_audited(tmp_path: Path) -> None:
    enforcement = Enforcement.start(Policy(), str(tmp_path), audit_log=tmp_path / "audit.log")
    enforcement.record_refusal(
        "authenticate", "unknown token", principal=None, transport="grpc", peer="127.0.0.1:5"
    )
    enforcement.close()
    enforcement.record_refusal("authenticate", "after close", principal=None, transport="grpc")
    (record,) = read_records([tmp_path / "audit.log"])
    assert record["decision"] == "deny" and record["code"] == "unauthenticated"
    assert record["peer"] == "127.0.0.1:5"


@pytest.mark.parametrize(
    ("given", "written"),
    [
        ("ipv4:127.0.0.1:52740", "127.0.0.1:52740"),
        ("127.0.0.1:54096", "127.0.0.1:54096"),
        ("ipv6:[::1]:52740", "[::1]:52740"),
        ("::1:52740", "[::1]:52740"),
        ("unix:/run/x.sock", "unix:/run/x.sock"),
        ("", None),
        (None, None),
    ],
)
def test_peers_are_written_one_way_for_every_transport(
    given: str | None, written: str | None
) -> None:
    """gRPC wrote ``ipv4:127.0.0.1:52740`` where SSH wrote ``127.0.0.1:54096``."""
    from broker._guard import peer_address

    assert peer_address(given) == written
