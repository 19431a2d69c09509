"""``opsbroker mcp --root --policy --audit-log``: the policy file decides, and every call is in
the hash-chained audit log with transport ``mcp``, as ``opsbroker serve`` records it."""

from __future__ import annotations

import json
from pathlib import Path

import anyio

from broker import verify_files

from ._client import CALL_TIMEOUT_S, mcp_session


async def test_policy_decides_and_audit_records(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.secret").write_text("classified\n")
    (root / "a.txt").write_text("open\n")
    policy = tmp_path / "policy.toml"
    policy.write_text('deny_read = ["**/*.secret"]\n')
    audit = tmp_path / "audit.jsonl"
    args = ["--root", str(root), "--policy", str(policy), "--audit-log", str(audit)]
    async with mcp_session(*args) as session:
        with anyio.fail_after(CALL_TIMEOUT_S):
            denied = await session.call_tool("read", {"path": "notes.secret"})
            allowed = await session.call_tool("read", {"path": "a.txt"})
    assert denied.is_error
    assert "deny_read: **/*.secret" in denied.content[0].text  # type: ignore[union-attr]
    assert not allowed.is_error
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    ops = [line for line in lines if line.get("type") == "op"]
    assert ops and all(op["transport"] == "mcp" and op["principal"] == "local" for op in ops)
    assert any(
        op["decision"] == "deny" and op["reason"] == "deny_read: **/*.secret" for op in ops
    ), ops
    assert any(op["decision"] == "allow" and op["path"].endswith("a.txt") for op in ops), ops
    assert verify_files([audit]).ok
