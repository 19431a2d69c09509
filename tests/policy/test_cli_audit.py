"""``opsbroker audit verify|query|summary`` on generated logs, including a 1,000-operation one."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from broker._audit import AuditLog
from broker._cli_audit import main

START = 1_800_000_000.0  # 2027-01-15T08:00:00Z
OPS = ("read_file", "write_file", "exec", "stat", "search", "remove")


def generate(path: Path, count: int) -> None:
    """A log of ``count`` operations by three principals, every seventh one refused."""
    clock = iter(START + i for i in range(count + 1))
    log = AuditLog(path, clock=lambda: next(clock))
    for index in range(count):
        op = OPS[index % len(OPS)]
        denied = index % 7 == 0
        log.record(
            {
                "op": op,
                "principal": ("alice", "bob", "ci")[index % 3],
                "transport": "grpc",
                "peer": "127.0.0.1:40000",
                "path": f"/ws/src/f{index % 10}.py" if not denied else "/ws/.env",
                "resolved": f"src/f{index % 10}.py" if not denied else ".env",
                "decision": "deny" if denied else "allow",
                "reason": "deny_read: **/.env" if denied else None,
                "duration_ms": 0.5,
                "exit_code": 0 if op == "exec" and not denied else None,
            }
        )
    log.close()


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(["audit", *argv], out)
    return status, out.getvalue()


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "audit.log"
    generate(path, 42)
    return path


def test_verify_intact(log: Path) -> None:
    status, text = cli("verify", str(log))
    assert status == 0
    assert text.startswith("intact: 43 lines, last hash ")


def test_verify_reports_the_broken_line(log: Path) -> None:
    lines = log.read_text().splitlines(keepends=True)
    lines[10] = lines[10].replace('"deny"', '"allow"').replace('"allow"', '"deny"', 1)
    log.write_text("".join(lines))
    status, text = cli("verify", str(log))
    assert status == 1
    assert text.startswith(f"broken at {log}:11: ")


def test_verify_with_a_wrong_head_and_a_missing_file(log: Path, tmp_path: Path) -> None:
    status, text = cli("verify", str(log), "--head", "f" * 64)
    assert status == 1 and "cut off the end" in text
    assert cli("verify", str(tmp_path / "missing"))[0] == 2


def test_query_filters(log: Path) -> None:
    status, text = cli("query", str(log), "--json", "--principal", "ci", "--operation", "exec")
    assert status == 0
    records = [json.loads(line) for line in text.splitlines()]
    assert records and all(r["principal"] == "ci" and r["op"] == "exec" for r in records)
    _, text = cli("query", str(log), "--json", "--decision", "deny")
    assert len(text.splitlines()) == 6  # indices 0, 7, ..., 35
    _, text = cli("query", str(log), "--json", "--path", ".env")
    assert len(text.splitlines()) == 6
    _, text = cli("query", str(log), "--json", "--path", "src/f1.py")
    assert {json.loads(line)["resolved"] for line in text.splitlines()} == {"src/f1.py"}
    _, text = cli(
        "query",
        str(log),
        "--json",
        "--since",
        "2027-01-15T08:00:10Z",
        "--until",
        "2027-01-15T08:00:20Z",
    )
    assert [json.loads(line)["seq"] for line in text.splitlines()] == list(range(10, 20))


def test_query_table(log: Path) -> None:
    status, text = cli("query", str(log), "--decision", "deny", "--principal", "bob")
    assert status == 0
    header, *rows = text.splitlines()
    assert header.split() == ["time", "principal", "transport", "op", "decision", "path", "detail"]
    assert rows and all("deny_read: **/.env" in row and "bob" in row for row in rows)


def test_query_rejects_a_bad_time(log: Path) -> None:
    assert cli("query", str(log), "--since", "yesterday")[0] == 2


def test_summary(log: Path) -> None:
    status, text = cli("summary", str(log), "--json")
    assert status == 0
    summary = json.loads(text)
    assert set(summary) == {"alice", "bob", "ci"}
    total = sum(
        data[k] for data in summary.values() for k in ("reads", "writes", "commands", "metadata")
    )
    assert total == 42
    assert sum(data["refusals"] for data in summary.values()) == 6
    assert summary["alice"]["top_paths"][0][1] >= 1
    status, text = cli("summary", str(log))
    assert status == 0 and "top paths of alice:" in text


def test_thousand_operations_in_well_under_a_second(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    started = time.perf_counter()
    generate(path, 1000)
    written = time.perf_counter() - started
    timings = {"write": written}
    for action, extra in (("verify", []), ("query", ["--path", "**/*.py"]), ("summary", [])):
        started = time.perf_counter()
        status, _ = cli(action, str(path), *extra)
        timings[action] = time.perf_counter() - started
        assert status == 0
    print("1,000-operation audit log, seconds:", {k: round(v, 4) for k, v in timings.items()})
    assert all(seconds < 5 for seconds in timings.values()), timings  # loose: the CI box is shared


def test_summary_names_unauthenticated_attempts() -> None:
    """Refusals before a principal was known were grouped under ``None``."""
    from broker._cli_audit import UNAUTHENTICATED, summarise

    summary = summarise([{"op": "auth", "principal": None, "decision": "deny"}])
    assert list(summary) == [UNAUTHENTICATED] and summary[UNAUTHENTICATED]["refusals"] == 1
