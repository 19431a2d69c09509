"""A small write over gRPC (one ``WriteSmallFile``) is decided, refused and audited exactly as the
same write streamed by ``WriteFile``: the same error, word for word, and the same audit line."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker._audit import read_records
from operations import OpsError
from tests.grpc._harness import client, count_calls, serving

pytestmark = pytest.mark.anyio

MAX_WRITE = 100
VOLATILE = ("seq", "time", "prev", "hash", "duration_ms")
"""Audit fields that differ between any two lines."""

CASES = [
    ("allowed.txt", b"x" * 10, None),
    ("at-the-limit.txt", b"x" * MAX_WRITE, 0o600),
    ("above-the-limit.txt", b"x" * (MAX_WRITE + 1), None),
    (".env", b"TOKEN=1\n", None),
    ("../escape.txt", b"x", None),
    ("missing/dir/f.txt", b"x", None),
]


async def _outcome(write: object) -> tuple[str, str] | None:
    try:
        await write  # type: ignore[misc]
    except OpsError as exc:
        return type(exc).__name__, str(exc)
    return None


async def test_a_small_write_is_refused_and_audited_as_the_streamed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = count_calls(monkeypatch, "WriteSmallFile", "WriteFile")
    policy = tmp_path / "policy.toml"
    policy.write_text(f"max_write_bytes = {MAX_WRITE}\n")
    audit = tmp_path / "audit.jsonl"
    outcomes = []
    async with (
        serving(tmp_path, None, policy=policy, audit_log=audit) as server,
        client(server) as ops,
    ):
        for name, data, mode in CASES:
            path = f"{ops.root}/{name}"

            async def streamed(path: str = path, data: bytes = data) -> None:
                yield data

            small = await _outcome(ops.write_file(path, data, mode=mode))
            stream = await _outcome(ops.write_chunks(path, streamed(), mode=mode))
            outcomes.append((name, small, stream))
    assert calls == {"WriteSmallFile": len(CASES), "WriteFile": len(CASES)}
    assert all(small == stream for _, small, stream in outcomes), outcomes
    kinds = {name: small and small[0] for name, small, _ in outcomes}
    assert kinds == {
        "allowed.txt": None,
        "at-the-limit.txt": None,
        "above-the-limit.txt": "TooLarge",
        ".env": "PolicyDenied",
        "../escape.txt": "EscapesRoot",
        "missing/dir/f.txt": "NotFound",
    }
    records = [r for r in read_records([audit]) if r.get("op") == "write_file"]
    for record in records:
        for field in VOLATILE:
            record.pop(field, None)
    # One line per write; each small write's line is the line of the streamed write after it.
    assert records[0::2] == records[1::2]
    assert len(records) == 2 * len(CASES), records
    assert [r["decision"] for r in records[0::2]] == [
        "allow",
        "allow",
        "error",
        "deny",
        "deny",
        "error",
    ], records
