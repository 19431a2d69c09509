"""The SDK's client on ``opsbroker mcp --root``: the tools as the runtime declares them, and every
call's result byte for byte the one ``execute_tool_calls`` gives on the same embedded broker."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession

from agent_side._mcp import embedded_broker
from agent_side.tools import ALL_TOOL_NAMES, create_all_tools

from ._client import CALL_TIMEOUT_S, direct_call, mcp_bytes, mcp_session
from ._workspace import build, tree_hash


@dataclass(frozen=True)
class Case:
    name: str
    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: bool | None = False  # the result's isError (None: depends on the host, e.g. pwsh)


CASES = [
    Case("read", "read", {"path": "a.txt"}),
    Case("read-offset-limit", "read", {"path": "a.txt", "offset": 2, "limit": 1}),
    Case("read-image", "read", {"path": "img.png"}),
    Case("read-missing", "read", {"path": "nope.txt"}, error=True),
    Case("read-dotdot-escape", "read", {"path": "../decoy/secret"}, error=True),
    Case("read-symlink-escape", "read", {"path": "out_file"}, error=True),
    Case("read-dir-symlink-escape", "read", {"path": "out/secret"}, error=True),
    Case("read-denied-env", "read", {"path": ".env"}, error=True),
    Case("read-no-path", "read", {}, error=True),
    Case("read-path-not-string", "read", {"path": ["a.txt"]}, error=True),
    Case("read-extra-key", "read", {"path": "a.txt", "bogus": 1}),
    Case("write", "write", {"path": "new/c.txt", "content": "x\n"}),
    Case("write-escape", "write", {"path": "out/planted", "content": "x"}, error=True),
    Case(
        "write-absolute-escape",
        "write",
        {"path": "/tmp/opsbroker-mcp-planted", "content": "x"},
        error=True,
    ),
    Case("write-denied-env", "write", {"path": ".env", "content": "x"}, error=True),
    Case("write-no-content", "write", {"path": "c.txt"}, error=True),
    Case("edit", "edit", {"path": "a.txt", "edits": [{"oldText": "world", "newText": "there"}]}),
    Case(
        "edit-no-match",
        "edit",
        {"path": "a.txt", "edits": [{"oldText": "zzz", "newText": "y"}]},
        error=True,
    ),
    Case(
        "edit-escape",
        "edit",
        {"path": "out_file", "edits": [{"oldText": "decoy", "newText": "x"}]},
        error=True,
    ),
    Case("edit-bad-edits", "edit", {"path": "a.txt", "edits": "world"}, error=True),
    Case("ls", "ls", {}),
    Case("ls-dir", "ls", {"path": "dir"}),
    Case("ls-escape", "ls", {"path": "out"}, error=True),
    Case("find", "find", {"pattern": "*.py"}),
    Case("find-escape", "find", {"pattern": "*", "path": "../decoy"}, error=True),
    Case("grep", "grep", {"pattern": "hello"}),
    Case("grep-no-match", "grep", {"pattern": "zzz-no-such"}),
    Case("grep-escape", "grep", {"pattern": "decoy", "path": "out"}, error=True),
    Case("grep-no-pattern", "grep", {}, error=True),
    Case("bash", "bash", {"command": "echo hi; echo err >&2"}),
    Case("bash-exit-code", "bash", {"command": "echo partial; exit 3"}, error=True),
    Case("bash-timeout", "bash", {"command": "echo start; sleep 30", "timeout": 1}, error=True),
    Case("bash-bad-timeout", "bash", {"command": "true", "timeout": -1}, error=True),
    Case("bash-no-command", "bash", {}, error=True),
    Case("powershell", "powershell", {"command": "Write-Output hi"}, error=None),
    Case("unknown-tool", "nope", {"x": 1}, error=True),
]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("mcp")
    root, decoy = base / "ws", base / "decoy"
    build(root, decoy)
    return root, decoy


@pytest.fixture(scope="module")
async def session(workspace: tuple[Path, Path]) -> AsyncIterator[ClientSession]:
    async with mcp_session("--root", str(workspace[0])) as client:
        yield client


@pytest.fixture(scope="module")
async def direct_tools(workspace: tuple[Path, Path]) -> AsyncIterator[list[Any]]:
    async with embedded_broker(workspace[0]) as backend:
        yield create_all_tools(cwd=backend.root, operations=backend)


async def test_lists_the_runtime_tools(
    session: ClientSession, workspace: tuple[Path, Path]
) -> None:
    listed = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert tuple(listed) == ALL_TOOL_NAMES
    for tool in create_all_tools(cwd=str(workspace[0])):
        shown = listed[tool.name]
        assert shown.description == tool.description
        assert shown.input_schema == tool.parameters_schema
        assert shown.annotations is not None
        read_only = tool.name in ("read", "ls", "find", "grep")
        assert shown.annotations.read_only_hint is read_only
        assert shown.annotations.destructive_hint is (None if read_only else True)
        assert shown.annotations.open_world_hint is False


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_result_is_the_loops(
    case: Case, session: ClientSession, direct_tools: list[Any], workspace: tuple[Path, Path]
) -> None:
    root, decoy = workspace
    build(root, decoy)
    before = tree_hash(decoy)
    with anyio.fail_after(CALL_TIMEOUT_S):
        expected = await direct_call(direct_tools, case.tool, case.arguments)
    build(root, decoy)
    with anyio.fail_after(CALL_TIMEOUT_S):
        result = await session.call_tool(case.tool, case.arguments)
    got = mcp_bytes(result)
    assert got == expected
    if case.error is not None:
        assert result.is_error is case.error, got
    assert tree_hash(decoy) == before
    if case.name == "read-image":
        assert "image" in [block.type for block in result.content], got
