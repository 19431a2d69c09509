"""Factories, schemas, legacy arguments, aborts, the mutation queue and the default backend."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agent_side.tools import (
    ALL_TOOL_NAMES,
    create_all_tools,
    create_coding_tools,
    create_edit_tool,
    create_read_only_tools,
    create_read_tool,
    create_tool,
    create_write_tool,
    prepare_edit_arguments,
)
from operations import AbortController, InMemoryOperations, PermissionDenied, PolicyDenied
from tests.tools._call import call, fail, text


def test_sets_and_names() -> None:
    ops = InMemoryOperations()
    assert [t.name for t in create_all_tools("/workspace", ops)] == list(ALL_TOOL_NAMES)
    assert list(ALL_TOOL_NAMES) == [
        "read", "bash", "powershell", "edit", "write", "grep", "find", "ls",
    ]  # fmt: skip
    assert [t.name for t in create_coding_tools("/workspace", ops)] == [
        "read",
        "bash",
        "edit",
        "write",
    ]
    assert [t.name for t in create_read_only_tools("/workspace", ops)] == [
        "read",
        "grep",
        "find",
        "ls",
    ]
    with pytest.raises(ValueError, match=r"^Unknown tool name: nope$"):
        create_tool("nope", "/workspace", ops)


def test_schemas_match_the_reference() -> None:
    ops = InMemoryOperations()
    tools = {t.name: t for t in create_all_tools("/workspace", ops)}
    assert tools["read"].parameters_schema == {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "Path to the file to read (relative or absolute)",
            },
            "offset": {
                "type": "number",
                "description": "Line number to start reading from (1-indexed)",
            },
            "limit": {"type": "number", "description": "Maximum number of lines to read"},
        },
        "required": ["path"],
    }
    edit = tools["edit"].parameters_schema
    assert set(edit["properties"]) == {"path", "edits"}
    assert edit["properties"]["edits"]["items"]["required"] == ["oldText", "newText"]
    grep = tools["grep"].parameters_schema
    assert list(grep["properties"]) == [
        "pattern", "path", "glob", "ignoreCase", "literal", "context", "limit",
    ]  # fmt: skip
    assert grep["required"] == ["pattern"]


def test_experimental_strict_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    ops = InMemoryOperations()
    assert all(t.constrained_sampling is None for t in create_all_tools("/workspace", ops))
    monkeypatch.setenv("PI_EXPERIMENTAL", "1")
    strict = {t.name for t in create_all_tools("/workspace", ops) if t.constrained_sampling}
    assert strict == {"read", "bash", "powershell", "edit", "write"}


def test_prepare_edit_arguments() -> None:
    valid = {"path": "a", "edits": [{"oldText": "x", "newText": "y"}]}
    assert prepare_edit_arguments(valid) is valid
    for passthrough in (None, "text"):
        assert prepare_edit_arguments(passthrough) is passthrough
    folded = prepare_edit_arguments({"path": "a", "oldText": "x", "newText": "y"})
    assert folded == {"path": "a", "edits": [{"oldText": "x", "newText": "y"}]}
    appended = prepare_edit_arguments({**valid, "oldText": "p", "newText": "q"})
    assert appended["edits"] == [{"oldText": "x", "newText": "y"}, {"oldText": "p", "newText": "q"}]
    parsed = prepare_edit_arguments({"path": "a", "edits": '[{"oldText": "x", "newText": "y"}]'})
    assert parsed["edits"] == [{"oldText": "x", "newText": "y"}]
    single = prepare_edit_arguments({"path": "a", "edits": {"oldText": "x", "newText": "y"}})
    assert single["edits"] == [{"oldText": "x", "newText": "y"}]
    broken = {"path": "a", "edits": "[not json"}
    assert prepare_edit_arguments(broken) is broken


class Flaky(InMemoryOperations):
    """A backend whose ``access`` fails in a chosen way."""

    def __init__(self, error: Exception, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error = error

    async def access(self, path: str, *, writable: bool = False) -> None:
        raise self.error


async def test_edit_access_failures() -> None:
    ops = Flaky(RuntimeError("disk offline"), files={"broken.txt": "x"})
    edit = create_edit_tool("/workspace", operations=ops)
    message = await fail(edit, path="broken.txt", edits=[{"oldText": "x", "newText": "y"}])
    assert message == "Could not edit file: broken.txt. Error: disk offline."
    ops = Flaky(PermissionDenied("access", "/workspace/ro.txt"), files={"ro.txt": "x"})
    edit = create_edit_tool("/workspace", operations=ops)
    message = await fail(edit, path="ro.txt", edits=[{"oldText": "x", "newText": "y"}])
    assert message == "Could not edit file: ro.txt. Error code: EACCES."


class SlowWrites(InMemoryOperations):
    """Writes take ``delay`` seconds, so a second call can queue behind one in flight."""

    delay = 0.05

    async def write_file(self, path: str, content: bytes | str) -> None:
        await asyncio.sleep(self.delay)
        await super().write_file(path, content)


async def test_aborted_write_keeps_the_queue_until_it_settles() -> None:
    ops = SlowWrites({"f.txt": "start\n"})
    write = create_write_tool("/workspace", operations=ops)
    controller = AbortController()
    first = asyncio.create_task(call(write, controller.signal, path="f.txt", content="first\n"))
    await asyncio.sleep(0.01)
    controller.abort()
    second = asyncio.create_task(call(write, path="f.txt", content="second\n"))
    with pytest.raises(Exception, match=r"^Operation aborted$"):
        await first
    assert ops.snapshot()["f.txt"] == b"first\n"  # the aborted write still landed
    await second
    assert ops.snapshot()["f.txt"] == b"second\n"


async def test_parallel_edits_and_writes_share_a_queue() -> None:
    ops = SlowWrites({"f.txt": "alpha\nbeta\ngamma\n"})
    edit = create_edit_tool("/workspace", operations=ops)
    write = create_write_tool("/workspace", operations=ops)
    await asyncio.gather(
        call(edit, path="f.txt", edits=[{"oldText": "alpha", "newText": "ALPHA"}]),
        call(edit, path="/workspace/f.txt", edits=[{"oldText": "beta", "newText": "BETA"}]),
    )
    assert ops.snapshot()["f.txt"] == b"ALPHA\nBETA\ngamma\n"
    await asyncio.gather(
        call(edit, path="f.txt", edits=[{"oldText": "gamma", "newText": "GAMMA"}]),
        call(write, path="f.txt", content="replacement\n"),
    )
    assert ops.snapshot()["f.txt"] == b"replacement\n"


class SlowReads(InMemoryOperations):
    async def read_file(self, path: str) -> bytes:
        await asyncio.sleep(10)
        return b""


async def test_read_rejects_at_once_on_abort() -> None:
    read = create_read_tool("/workspace", operations=SlowReads({"a.txt": "x"}))
    controller = AbortController()
    asyncio.get_running_loop().call_later(0.02, controller.abort)
    async with asyncio.timeout(2):
        assert await fail(read, controller.signal, path="a.txt") == "Operation aborted"
    assert await fail(read, controller.signal, path="a.txt") == "Operation aborted"


async def test_session_cwd_wins(tmp_path: Path) -> None:
    from agent_side import ToolContext, wrap_tool_definition
    from agent_side.tools import create_read_tool_definition

    ops = InMemoryOperations({"sub/a.txt": "in sub\n", "a.txt": "at root\n"})
    definition = create_read_tool_definition("/workspace", operations=ops)
    tool = wrap_tool_definition(definition, lambda: ToolContext(cwd="/workspace/sub"))
    assert text(await call(tool, path="a.txt")) == "in sub\n"
    assert text(await call(create_read_tool("/workspace", operations=ops), path="a.txt")) == (
        "at root\n"
    )
    assert text(await call(create_read_tool("/workspace", operations=ops), path="~/a.txt")) == (
        "at root\n"
    )


async def test_default_backend_is_local(tmp_path: Path) -> None:
    (tmp_path / "hello.txt").write_text("local file\n")
    tools = {t.name: t for t in create_all_tools(str(tmp_path))}
    assert text(await call(tools["read"], path="hello.txt")) == "local file\n"
    await call(tools["write"], path="made/here.txt", content="ok\n")
    assert (tmp_path / "made" / "here.txt").read_text() == "ok\n"
    assert text(await call(tools["bash"], command="cat made/here.txt")) == "ok\n"


def test_prompt_contributions() -> None:
    from agent_side.tools import create_all_tool_definitions

    ops = InMemoryOperations()
    found = {
        d.name: (d.prompt_snippet, list(d.prompt_guidelines or []))
        for d in create_all_tool_definitions("/workspace", ops)
    }
    assert found["read"] == (
        "Read file contents",
        ["Use read to examine files instead of cat or sed."],
    )
    assert found["write"] == (
        "Create or overwrite files",
        ["Use write only for new files or complete rewrites."],
    )
    assert found["grep"] == ("Search file contents for patterns (respects .gitignore)", [])
    assert found["find"] == ("Find files by glob pattern (respects .gitignore)", [])
    assert found["ls"] == ("List directory contents", [])
    assert found["powershell"][0] == "Execute PowerShell commands"
    assert (
        found["edit"][1][0] == "Use edit for precise changes (edits[].oldText must match exactly)"
    )
    assert len(found["edit"][1]) == 4


class Guarded(InMemoryOperations):
    """A backend whose policy refuses writes to ``*.pem``."""

    async def write_file(self, path: str, content: bytes | str) -> None:
        if path.endswith(".pem"):
            raise PolicyDenied("write_file", path, rule="deny_write: **/*.pem")
        await super().write_file(path, content)


async def test_policy_denial_names_the_rule() -> None:
    write = create_write_tool("/workspace", operations=Guarded())
    message = await fail(write, path="keys/server.pem", content="secret")
    assert message == (
        "POLICY_DENIED: denied by policy (deny_write: **/*.pem), open '/workspace/keys/server.pem'"
    )
