"""GuardedBackend: policy refusals name the rule, and every call leaves one audit event."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from broker._audit import AuditLog, read_records, verify_files
from operations import (
    GuardedBackend,
    KillReason,
    NotFound,
    Policy,
    PolicyDenied,
    TooLarge,
    Unavailable,
)

from ._fake import ROOT, FakeBackend, ListAudit

FILES = {
    "src/main.py": b"print('hello')\nTOKEN = 'no'\n",
    "certs/server.pem": b"-----BEGIN TOKEN-----\n",
    ".env": b"TOKEN=abc\n",
    "img.png": b"\x89PNG....",
    "repo/.git/hooks/pre-commit": b"#!/bin/sh\n",
    "repo/readme": b"hi\n",
}


def make(
    policy: Policy | None = None, **kwargs: Any
) -> tuple[GuardedBackend, FakeBackend, ListAudit]:
    inner = FakeBackend(FILES)
    audit = ListAudit()
    guard = GuardedBackend(
        inner,
        policy or Policy(),
        audit=audit,
        principal="alice",
        transport="grpc",
        peer="127.0.0.1:5000",
        parent_env={"PATH": "/usr/bin", "SECRET_TOKEN": "t0ken", "HOME": "/home/a"},
        **kwargs,
    )
    return guard, inner, audit


async def sink(data: bytes) -> None:
    return None


# -- the four refusals "Done when" names -----------------------------------------------------


async def test_denied_read_names_the_rule() -> None:
    guard, inner, audit = make()
    with pytest.raises(PolicyDenied) as info:
        await guard.read_file(f"{ROOT}/certs/server.pem")
    assert info.value.rule == "deny_read: **/*.pem"
    assert "deny_read: **/*.pem" in str(info.value)
    assert "read_file" not in inner.calls  # refused before the backend saw it
    (event,) = audit.events
    assert event["decision"] == "deny"
    assert event["reason"] == "deny_read: **/*.pem"
    assert event["code"] == "policy_denied"
    assert event["resolved"] == "certs/server.pem"


async def test_write_into_read_only_tree() -> None:
    guard, inner, audit = make(Policy(read_only=True))
    for attempt in (
        guard.write_file(f"{ROOT}/src/new.py", "x"),
        guard.mkdir(f"{ROOT}/d"),
        guard.remove(f"{ROOT}/src/main.py"),
        guard.rename(f"{ROOT}/src/main.py", f"{ROOT}/src/m.py"),
    ):
        with pytest.raises(PolicyDenied) as info:
            await attempt
        assert info.value.rule == "read_only"
    assert inner.files == FILES
    assert [e["decision"] for e in audit.events] == ["deny"] * 4
    assert await guard.read_file(f"{ROOT}/src/main.py") == FILES["src/main.py"]


async def test_exec_when_disabled() -> None:
    guard, inner, audit = make(Policy.from_mapping({"exec": {"enabled": False}}))
    with pytest.raises(PolicyDenied) as info:
        await guard.exec("print:hi", ROOT, on_data=sink)
    assert info.value.rule == "exec.enabled: false"
    with pytest.raises(PolicyDenied):
        await guard.powershell.exec("print:hi", ROOT, on_data=sink)
    assert "exec" not in inner.calls
    assert audit.events[0]["op"] == "exec"
    assert audit.events[1]["op"] == "exec_powershell"


async def test_timeout_above_maximum_is_refused() -> None:
    guard, inner, audit = make()
    with pytest.raises(PolicyDenied) as info:
        await guard.exec("print:hi", ROOT, on_data=sink, timeout=3600)
    assert info.value.rule == "exec.max_timeout: 600"
    assert "ask for at most 600 s" in str(info.value)
    assert audit.events[-1]["decision"] == "deny"
    result = await guard.exec("print:hi", ROOT, on_data=sink)
    assert result.exit_code == 0
    assert inner.exec_timeout == 120.0  # the default timeout is enforced when none is given


# -- other rules ------------------------------------------------------------------------------


async def test_deny_write_and_tree_checks() -> None:
    guard, inner, _ = make()
    with pytest.raises(PolicyDenied, match=r"\*\*/\.git/hooks"):
        await guard.write_file(f"{ROOT}/repo/.git/hooks/post-merge", "#!/bin/sh\n")
    with pytest.raises(PolicyDenied, match=r"\*\*/\.git/hooks"):
        await guard.remove(f"{ROOT}/repo", recursive=True)
    with pytest.raises(PolicyDenied, match=r"\*\*/\.git/hooks"):
        await guard.rename(f"{ROOT}/repo", f"{ROOT}/elsewhere")
    assert inner.files == FILES


async def test_moving_a_secret_to_a_readable_name_is_refused() -> None:
    policy = Policy(deny_read=["**/.env"], deny_write=[], replace_default_deny_write=True)
    guard, inner, _ = make(policy)
    with pytest.raises(PolicyDenied) as info:
        await guard.rename(f"{ROOT}/.env", f"{ROOT}/env.txt")
    assert info.value.rule == "deny_read: **/.env"
    await guard.rename(f"{ROOT}/.env", f"{ROOT}/sub/.env")  # still denied to read: fine
    assert "sub/.env" in inner.files


async def test_a_backend_that_resolves_is_asked_about_the_link_target() -> None:
    from operations import InMemoryOperations, Symlink

    inner = InMemoryOperations({".env": b"TOKEN=abc\n", "notes": Symlink(".env")}, root=ROOT)
    guard = GuardedBackend(inner, Policy(), close_inner=False)
    with pytest.raises(PolicyDenied) as info:
        await guard.read_file(f"{ROOT}/notes")
    assert info.value.rule == "deny_read: **/.env"


async def test_a_backend_that_cannot_resolve_is_judged_on_the_path_as_written() -> None:
    guard, inner, _ = make()
    with pytest.raises(PolicyDenied):
        await guard.read_file(f"{ROOT}/sub/../.env")
    assert "read_file" not in inner.calls  # refused before the backend saw it


async def test_search_and_glob_never_show_denied_files() -> None:
    guard, _, audit = make()
    matches = [m async for m in guard.search("TOKEN", ROOT)]
    assert [m.path for m in matches] == [f"{ROOT}/src/main.py"]
    assert audit.events[-1]["count"] == 1
    names = await guard.glob("*", ROOT)
    assert ".env" not in names and "certs/server.pem" not in names
    assert "src/main.py" in names


async def test_size_limits() -> None:
    guard, _, audit = make(Policy(max_read_bytes=10, max_write_bytes=4))
    with pytest.raises(TooLarge, match="max_read_bytes"):
        await guard.read_file(f"{ROOT}/src/main.py")
    with pytest.raises(TooLarge, match="max_write_bytes"):
        await guard.write_file(f"{ROOT}/a", "hello")
    assert [e["code"] for e in audit.events] == ["too_large", "too_large"]


async def test_output_limit_kills_and_truncates() -> None:
    guard, _, audit = make(Policy.from_mapping({"exec": {"max_output_bytes": 5000}}))
    received = bytearray()

    def collect(data: bytes) -> None:
        received.extend(data)

    result = await guard.exec("flood", ROOT, on_data=collect)
    assert result.exit_code is None
    assert result.kill_reason is KillReason.OUTPUT_LIMIT
    assert len(received) == 5000
    assert audit.events[-1]["kill_reason"] == "output_limit"
    assert audit.events[-1]["bytes_out"] == 5000


async def test_command_env_is_the_allowlist_plus_caller_values() -> None:
    guard, inner, _ = make()
    await guard.exec("print:x", ROOT, on_data=sink, env={"FOO": "1"})
    assert inner.exec_env == {"PATH": "/usr/bin", "HOME": "/home/a", "FOO": "1"}


async def test_command_text_can_be_hashed_in_the_audit() -> None:
    guard, _, audit = make(Policy.from_mapping({"audit": {"log_commands": False}}))
    await guard.exec("print:TOKEN=abc", ROOT, on_data=sink)
    assert str(audit.events[-1]["command"]).startswith("sha256:")
    assert "abc" not in str(audit.events)


# -- audit failure ----------------------------------------------------------------------------


async def test_fail_closed_refuses_while_the_audit_log_is_broken() -> None:
    guard, inner, audit = make()
    audit.fail = True
    with pytest.raises(Unavailable, match="audit line could not be written"):
        await guard.read_file(f"{ROOT}/src/main.py")
    inner.calls.clear()
    with pytest.raises(Unavailable, match=r"audit\.fail_closed"):
        await guard.read_file(f"{ROOT}/src/main.py")
    assert inner.calls == []  # refused before the backend saw it
    audit.fail = False
    with pytest.raises(Unavailable):  # this refusal is recorded, and the log is healthy again
        await guard.read_file(f"{ROOT}/src/main.py")
    assert audit.events[-1]["code"] == "unavailable"
    assert await guard.read_file(f"{ROOT}/src/main.py") == FILES["src/main.py"]


async def test_fail_open_runs_unaudited_when_configured() -> None:
    guard, _, audit = make(Policy.from_mapping({"audit": {"fail_closed": False}}))
    audit.fail = True
    assert await guard.read_file(f"{ROOT}/src/main.py") == FILES["src/main.py"]
    assert await guard.read_file(f"{ROOT}/src/main.py") == FILES["src/main.py"]


# -- one event per call, every operation type -------------------------------------------------

Call = Callable[[GuardedBackend], Awaitable[object]]


async def _search(guard: GuardedBackend) -> object:
    return [m async for m in guard.search("hello", ROOT)]


OPERATIONS: dict[str, tuple[Call, dict[str, object]]] = {
    "read_file": (lambda g: g.read_file(f"{ROOT}/src/main.py"), {"bytes_out": 28}),
    "access": (lambda g: g.access(f"{ROOT}/src/main.py", writable=True), {"writable": True}),
    "detect_image_mime_type": (lambda g: g.detect_image_mime_type(f"{ROOT}/img.png"), {}),
    "write_file": (lambda g: g.write_file(f"{ROOT}/src/new.py", "abc"), {"bytes_in": 3}),
    "mkdir": (lambda g: g.mkdir(f"{ROOT}/newdir"), {"resolved": "newdir"}),
    "exists": (lambda g: g.exists(f"{ROOT}/src"), {"resolved": "src"}),
    "stat": (lambda g: g.stat(f"{ROOT}/src/main.py"), {}),
    "lstat": (lambda g: g.lstat(f"{ROOT}/src/main.py"), {}),
    "is_directory": (lambda g: g.is_directory(f"{ROOT}/src"), {}),
    "readdir": (lambda g: g.readdir(f"{ROOT}/src"), {"count": 1}),
    "list_dir": (lambda g: g.list_dir(f"{ROOT}/src"), {"count": 1}),
    "glob": (lambda g: g.glob("**/*.py", ROOT), {"pattern": "**/*.py"}),
    "search": (_search, {"pattern": "hello", "count": 1}),
    "remove": (lambda g: g.remove(f"{ROOT}/src/main.py"), {"recursive": False}),
    "rename": (
        lambda g: g.rename(f"{ROOT}/src/main.py", f"{ROOT}/src/m.py"),
        {"destination": f"{ROOT}/src/m.py", "destination_resolved": "src/m.py"},
    ),
    "exec": (
        lambda g: g.exec("print:hello", f"{ROOT}/src", on_data=sink),
        {"exit_code": 0, "kill_reason": None, "bytes_out": 5, "command": "print:hello"},
    ),
    "exec_powershell": (
        lambda g: g.powershell.exec("exit:3", ROOT, on_data=sink),
        {"exit_code": 3},
    ),
}


@pytest.mark.parametrize("op", sorted(OPERATIONS))
async def test_every_operation_leaves_one_audit_line(op: str, tmp_path: Path) -> None:
    call, expected = OPERATIONS[op]
    log = AuditLog(tmp_path / "audit.log")
    policy = Policy.from_mapping({"exec": {"shells": ["bash", "powershell"]}})
    guard = GuardedBackend(
        FakeBackend(FILES), policy, audit=log, principal="alice", transport="ssh", peer="::1"
    )
    await call(guard)
    log.close()
    (record,) = list(read_records([tmp_path / "audit.log"]))
    assert record["op"] == op
    assert record["principal"] == "alice"
    assert record["transport"] == "ssh"
    assert record["peer"] == "::1"
    assert record["decision"] == "allow"
    assert isinstance(record["duration_ms"], float)
    assert str(record["time"]).endswith("Z")
    for key, value in expected.items():
        assert record[key] == value, key
    assert verify_files([tmp_path / "audit.log"]).ok
    assert "hello')" not in (tmp_path / "audit.log").read_text()  # never file contents


async def test_errors_are_recorded_with_their_code() -> None:
    guard, _, audit = make()
    with pytest.raises(NotFound):
        await guard.read_file(f"{ROOT}/missing")
    assert audit.events[-1]["decision"] == "error"
    assert audit.events[-1]["code"] == "not_found"
    from operations import EscapesRoot

    with pytest.raises(EscapesRoot):
        await guard.read_file(f"{ROOT}/../etc/passwd")
    assert audit.events[-1]["decision"] == "deny"
    assert audit.events[-1]["resolved"] is None


async def test_aclose_respects_close_inner() -> None:
    guard, inner, _ = make(close_inner=False)
    async with guard:
        pass
    assert not inner.closed
    guard, inner, _ = make()
    await guard.aclose()
    assert inner.closed
