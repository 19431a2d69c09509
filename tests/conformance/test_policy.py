"""Policy and audit on every backend: the same refusals, with the same rule, and one audit line
per operation.

Each backend is wrapped in :class:`~operations.GuardedBackend`, as every front-end wraps the
broker core; the assertions do not depend on which backend is underneath.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker._audit import AuditLog, read_records, verify_files
from operations import GuardedBackend, Policy, PolicyDenied
from tests.conformance._commands import ECHO_ENV, ECHO_HI, ENV_VAR, EXIT_3
from tests.conformance._workspace import Workspace
from tests.policy._fake import ListAudit

BOTH_SHELLS = {"exec": {"shells": ["bash", "powershell"]}}


def guarded(ws: Workspace, policy: Policy | None = None) -> tuple[GuardedBackend, ListAudit]:
    audit = ListAudit()
    guard = GuardedBackend(ws.ops, policy or Policy(), audit=audit, close_inner=False)
    return guard, audit


async def sink(data: bytes) -> None:
    return None


async def test_denied_read(ws: Workspace) -> None:
    ws.write_raw("certs/server.pem", b"-----BEGIN PRIVATE KEY-----\n")
    guard, audit = guarded(ws)
    with pytest.raises(PolicyDenied) as info:
        await guard.read_file(ws.path("certs/server.pem"))
    assert info.value.rule == "deny_read: **/*.pem"
    assert str(info.value) == (
        f"read_file {ws.path('certs/server.pem')!r}: denied by policy (deny_read: **/*.pem)"
    )
    assert audit.events[-1]["decision"] == "deny"
    assert await ws.ops.read_file(ws.path("certs/server.pem"))  # the backend alone would read it


async def test_write_into_read_only_tree(ws: Workspace) -> None:
    ws.make(["src/", "src/a.py"])
    guard, _ = guarded(ws, Policy(read_only=True))
    for attempt in (
        guard.write_file(ws.path("src/a.py"), "changed"),
        guard.write_file(ws.path("src/new.py"), "new"),
        guard.mkdir(ws.path("src/d")),
        guard.remove(ws.path("src/a.py")),
        guard.rename(ws.path("src/a.py"), ws.path("src/b.py")),
    ):
        with pytest.raises(PolicyDenied) as info:
            await attempt
        assert info.value.rule == "read_only"
    assert ws.read_raw("src/a.py") == b"a.py"
    assert not ws.exists_raw("src/new.py") and not ws.exists_raw("src/d")


async def test_exec_when_disabled(ws: Workspace) -> None:
    guard, _ = guarded(ws, Policy.from_mapping({"exec": {"enabled": False}}))
    with pytest.raises(PolicyDenied) as info:
        await guard.exec(ECHO_HI, ws.root, on_data=sink)
    assert info.value.rule == "exec.enabled: false"


async def test_timeout_above_the_maximum_is_refused(ws: Workspace) -> None:
    guard, _ = guarded(
        ws, Policy.from_mapping({"exec": {"max_timeout": 60, "default_timeout": 10}})
    )
    with pytest.raises(PolicyDenied) as info:
        await guard.exec(ECHO_HI, ws.root, on_data=sink, timeout=61)
    assert info.value.rule == "exec.max_timeout: 60"
    assert "ask for at most 60 s" in str(info.value)


async def test_search_never_returns_denied_lines(ws: Workspace) -> None:
    ws.write_raw(".env", b"TOKEN=abc\n")
    ws.write_raw("app/.env.local", b"TOKEN=def\n")
    ws.write_raw("src/a.py", b"TOKEN = os.environ['TOKEN']\n")
    guard, _ = guarded(ws)
    found = [match.path async for match in guard.search("TOKEN", ws.root)]
    assert found == [ws.path("src/a.py")]


async def test_command_env_is_built_from_policy(ws: Workspace) -> None:
    guard, _ = guarded(ws, Policy.from_mapping({"env": {"set": {ENV_VAR: "from-policy"}}}))
    out = bytearray()

    def collect(data: bytes) -> None:
        out.extend(data)

    await guard.exec(ECHO_ENV, ws.root, on_data=collect, timeout=30)
    assert out == b"from-policy\n"


async def test_every_operation_leaves_one_audit_line(ws: Workspace, tmp_path: Path) -> None:
    ws.make(["src/", "src/a.py", "d/", "d/x"])
    log = AuditLog(tmp_path / "audit.log")
    guard = GuardedBackend(
        ws.ops,
        Policy.from_mapping(BOTH_SHELLS),
        audit=log,
        principal="ci",
        transport="test",
        peer="127.0.0.1:1",
        close_inner=False,
    )
    p = ws.path
    await guard.read_file(p("src/a.py"))
    await guard.access(p("src/a.py"), writable=True)
    await guard.detect_image_mime_type(p("src/a.py"))
    await guard.write_file(p("src/b.py"), "quokka")
    await guard.mkdir(p("e"))
    await guard.exists(p("src"))
    await guard.stat(p("src/a.py"))
    await guard.lstat(p("src/a.py"))
    await guard.is_directory(p("src"))
    await guard.readdir(p("src"))
    await guard.list_dir(p("src"))
    await guard.glob("*.py", ws.root)
    _ = [m async for m in guard.search("zzz", ws.root)]
    await guard.rename(p("src/b.py"), p("src/c.py"))
    await guard.remove(p("d"), recursive=True)
    await guard.exec(EXIT_3, ws.root, on_data=sink, timeout=30)
    with pytest.raises(PolicyDenied):
        await guard.read_file(p(".env"))
    log.close()
    records = list(read_records([tmp_path / "audit.log"]))
    assert [r["op"] for r in records] == [
        "read_file",
        "access",
        "detect_image_mime_type",
        "write_file",
        "mkdir",
        "exists",
        "stat",
        "lstat",
        "is_directory",
        "readdir",
        "list_dir",
        "glob",
        "search",
        "rename",
        "remove",
        "exec",
        "read_file",
    ]
    for record in records:
        assert record["principal"] == "ci" and record["transport"] == "test"
        assert record["peer"] == "127.0.0.1:1"
        assert isinstance(record["duration_ms"], float)
        assert record["decision"] in ("allow", "deny")
    by_op = {r["op"]: r for r in records[:-1]}
    assert by_op["read_file"]["bytes_out"] == 4 and by_op["read_file"]["resolved"] == "src/a.py"
    assert by_op["write_file"]["bytes_in"] == 6
    assert by_op["rename"]["destination_resolved"] == "src/c.py"
    assert by_op["exec"]["exit_code"] == 3 and by_op["exec"]["kill_reason"] is None
    assert records[-1]["decision"] == "deny" and records[-1]["reason"] == "deny_read: **/.env"
    assert verify_files([tmp_path / "audit.log"]).ok
    assert b"quokka" not in (tmp_path / "audit.log").read_bytes()  # no file contents
