"""The audit chain: lines verify, and editing, inserting or deleting one is detected."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from broker._audit import (
    GENESIS,
    AuditError,
    AuditLog,
    AuditUnavailable,
    format_time,
    read_records,
    verify_files,
)


def write_log(path: Path, count: int = 5) -> AuditLog:
    log = AuditLog(path, clock=lambda: 1_800_000_000.25)
    for index in range(count):
        log.record({"op": "read_file", "principal": "alice", "path": f"/ws/f{index}"})
    return log


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def test_a_fresh_log_verifies(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    log = write_log(path)
    log.close()
    result = verify_files([path])
    assert result.ok, result
    assert result.lines == 6  # header + 5
    assert result.first_prev == GENESIS
    assert result.last_hash == log.last_hash
    header, first = (json.loads(line) for line in lines(path)[:2])
    assert header["type"] == "header" and header["seq"] == 0
    assert first["seq"] == 1 and first["prev"] == header["hash"]
    assert first["time"] == "2027-01-15T08:00:00.250Z"
    assert list(first)[-2:] == ["prev", "hash"]
    assert [r["path"] for r in read_records([path])] == [f"/ws/f{i}" for i in range(5)]


def test_an_edited_line_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    write_log(path).close()
    text = lines(path)
    text[3] = text[3].replace('"alice"', '"mallory"')
    path.write_text("".join(text))
    result = verify_files([path])
    assert not result.ok
    assert result.line == 4
    assert "edited" in (result.problem or "")


def test_an_edited_last_line_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    write_log(path).close()
    text = lines(path)
    text[-1] = text[-1].replace("/ws/f4", "/ws/ok")
    path.write_text("".join(text))
    assert verify_files([path]).line == 6


def test_an_inserted_line_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    write_log(path).close()
    text = lines(path)
    # A forger can seal a line of their own, but it cannot fit between two existing lines.
    forged = tmp_path / "forged.log"
    write_log(forged, 2).close()
    text.insert(3, lines(forged)[2])
    path.write_text("".join(text))
    result = verify_files([path])
    assert not result.ok
    assert result.line == 4
    assert "inserted or deleted" in (result.problem or "")


def test_a_deleted_line_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    write_log(path).close()
    text = lines(path)
    del text[2]
    path.write_text("".join(text))
    result = verify_files([path])
    assert not result.ok
    assert result.line == 3
    assert "inserted or deleted" in (result.problem or "")


def test_a_deleted_header_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    write_log(path).close()
    path.write_text("".join(lines(path)[1:]))
    assert verify_files([path]).line == 1


def test_cut_off_tail_is_detected_only_against_a_recorded_head(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    log = write_log(path)
    log.close()
    path.write_text("".join(lines(path)[:-2]))
    assert verify_files([path]).ok  # the chain alone cannot tell
    result = verify_files([path], head=log.last_hash)
    assert not result.ok
    assert "cut off the end" in (result.problem or "")


def test_reopening_continues_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    write_log(path, 3).close()
    log = write_log(path, 2)
    log.close()
    result = verify_files([path])
    assert result.ok and result.lines == 6
    assert [r["seq"] for r in read_records([path])] == [1, 2, 3, 4, 5]


def test_a_damaged_last_line_refuses_to_continue(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    write_log(path, 2).close()
    with path.open("a") as file:
        file.write('{"seq": 3, "half a li')
    with pytest.raises(AuditError, match="ends with a damaged line"):
        AuditLog(path)
    assert "incomplete" in (verify_files([path]).problem or "")


def test_rotation_keeps_one_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    log = AuditLog(path, rotate_bytes=600)
    for index in range(20):
        log.record({"op": "stat", "path": f"/ws/{index}"})
    log.close()
    rotated = sorted(tmp_path.glob("audit.log.*"))
    assert len(rotated) >= 2
    files = [*rotated, path]
    result = verify_files(files)
    assert result.ok, result
    assert [r["path"] for r in read_records(files)] == [f"/ws/{i}" for i in range(20)]
    # Each later file starts from the previous file's last hash ...
    assert verify_files([files[1]]).first_prev != GENESIS
    # ... so dropping a whole rotated file in the middle is detected.
    assert not verify_files([files[0], *files[2:]]).ok


def test_write_failure_raises_and_a_later_write_recovers(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    log = write_log(path, 1)
    log.close()
    with pytest.raises(AuditUnavailable, match="cannot write audit log"):
        log.record({"op": "stat"})
    assert not log.healthy
    log = AuditLog(path)
    log.record({"op": "stat"})
    assert log.healthy
    log.close()
    assert verify_files([path]).ok


def test_concurrent_writers_keep_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    log = AuditLog(path)

    def work(name: str) -> None:
        for index in range(100):
            log.record({"op": "stat", "principal": name, "path": str(index)})

    threads = [threading.Thread(target=work, args=(f"p{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    log.close()
    result = verify_files([path])
    assert result.ok and result.lines == 401


def test_file_mode_is_private(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    write_log(path, 1).close()
    assert path.stat().st_mode & 0o777 == 0o600


def test_format_time_sorts_as_text() -> None:
    assert format_time(0) == "1970-01-01T00:00:00.000Z"
    assert format_time(1.5) < format_time(10) < format_time(100.999)


def test_events_cannot_set_the_chain_members(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.log")
    for key in ("seq", "prev", "hash", "time", "type"):
        with pytest.raises(ValueError, match="the log sets them"):
            log.record({"op": "stat", key: "forged"})
    log.close()


def test_a_failed_rotation_keeps_writing_to_the_same_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import broker._audit as audit_module

    def refuse(*args: object) -> None:
        raise OSError(13, "Permission denied")

    monkeypatch.setattr(audit_module.os, "rename", refuse)
    path = tmp_path / "audit.log"
    log = AuditLog(path, rotate_bytes=300)
    for index in range(10):
        log.record({"op": "stat", "path": str(index)})
    log.close()
    assert list(tmp_path.iterdir()) == [path]
    assert verify_files([path]).ok


async def test_guard_over_a_closed_log_fails_closed(tmp_path: Path) -> None:
    from operations import GuardedBackend, InMemoryOperations, Policy, Unavailable

    log = AuditLog(tmp_path / "audit.log")
    core = InMemoryOperations({"a": b"1"})
    guard = GuardedBackend(core, Policy(), audit=log)
    assert await guard.read_file(f"{core.root}/a") == b"1"
    log.close()
    with pytest.raises(Unavailable, match="audit line could not be written"):
        await guard.read_file(f"{core.root}/a")
    with pytest.raises(Unavailable, match=r"audit\.fail_closed"):
        await guard.read_file(f"{core.root}/a")
    assert verify_files([tmp_path / "audit.log"]).ok


def test_one_writer_per_file(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    log = AuditLog(path)
    with pytest.raises(AuditError, match="in use by another process"):
        AuditLog(path)
    log.close()
    AuditLog(path).close()  # free again once closed
    assert verify_files([path]).ok
