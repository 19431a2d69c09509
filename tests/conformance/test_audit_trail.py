"""The audit trail names what a tool touched, once per decision, on every backend.

A refusal must be findable with ``audit query --decision deny --path ...``: the denied line
carries the operation's own path (as requested and as resolved), and one refused attempt is one
deny line, not one per internal step of the tool.
"""

from __future__ import annotations

from typing import Any

import pytest

from agent_side.tools import create_all_tools
from agent_side.tools._errors import ToolError
from operations import EscapesRoot, GuardedBackend, Policy
from tests.conformance._workspace import Workspace
from tests.policy._fake import ListAudit


def guarded(ws: Workspace, policy: Policy) -> tuple[GuardedBackend, ListAudit]:
    audit = ListAudit()
    return GuardedBackend(ws.ops, policy, audit=audit, close_inner=False), audit


async def call(guard: GuardedBackend, tool: str, args: dict[str, Any]) -> str:
    """Run one built-in tool over ``guard``; the ``ToolError`` text it fails with."""
    tools = {t.name: t for t in create_all_tools(guard.root, guard)}
    with pytest.raises(ToolError) as caught:
        await tools[tool].execute("call", tools[tool].parameters.model_validate(args), None, None)
    return str(caught.value)


def denies(audit: ListAudit) -> list[dict[str, object]]:
    return [e for e in audit.events if e["decision"] == "deny"]


async def test_a_refused_write_is_audited_on_the_file_it_writes(ws: Workspace) -> None:
    """It used to be ``mkdir deny <root>``: the mkdir of the existing parent was refused first."""
    guard, audit = guarded(ws, Policy(read_only=True))
    text = await call(guard, "write", {"path": "x.txt", "content": "x"})
    assert "x.txt" in text and "read_only" in text, text
    [deny] = denies(audit)
    assert (deny["op"], deny["path"], deny["resolved"]) == ("write_file", ws.path("x.txt"), "x.txt")
    assert not ws.exists_raw("x.txt")


async def test_mkdir_of_an_existing_directory_is_not_a_write(ws: Workspace) -> None:
    ws.make(["d/"])
    guard, audit = guarded(ws, Policy(read_only=True))
    await guard.mkdir(ws.path("d"))
    await guard.mkdir(ws.root)
    assert [(e["op"], e["decision"], e["resolved"]) for e in audit.events] == [
        ("mkdir", "allow", "d"),
        ("mkdir", "allow", ""),
    ]


async def test_a_refused_read_is_one_deny_line(ws: Workspace) -> None:
    """The read tool asked ``access`` twice for the same path: two denies for one attempt."""
    ws.write_raw(".env", b"TOKEN=1\n")
    guard, audit = guarded(ws, Policy())
    text = await call(guard, "read", {"path": ".env"})
    assert (
        text == f"POLICY_DENIED: denied by policy (deny_read: **/.env), access {ws.path('.env')!r}"
    )
    [deny] = denies(audit)
    assert (deny["path"], deny["resolved"]) == (ws.path(".env"), ".env")


@pytest.mark.parametrize("cwd", ["../..", "/etc"])
async def test_an_exec_cwd_escape_is_refused_and_audited(ws: Workspace, cwd: str) -> None:
    guard, audit = guarded(ws, Policy())
    requested = cwd if cwd.startswith("/") else ws.path(cwd)

    async def sink(data: bytes) -> None:
        return None

    with pytest.raises(EscapesRoot) as caught:
        await guard.exec("echo hi", requested, on_data=sink)
    [deny] = denies(audit)
    assert (deny["op"], deny["path"], deny["code"]) == ("exec", requested, EscapesRoot.code)
    with pytest.raises(EscapesRoot) as read:
        await ws.ops.read_file(requested)
    assert (caught.value.path, caught.value.reason) == (requested, read.value.reason)
