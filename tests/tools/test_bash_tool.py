"""bash (and powershell) on every backend, plus the reference's custom-operations cases."""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agent_side import AgentToolResult, ToolContext
from agent_side.tools import (
    SpawnContext,
    create_bash_tool,
    create_powershell_tool,
    create_read_tool,
)
from operations import AbortController, AbortSignal, ExecResult, KillReason
from operations._runner import CommandContext
from tests.tools._call import call, fail, text
from tests.tools.conftest import ToolWorkspace


async def test_echo(tw: ToolWorkspace) -> None:
    tw.script("echo 'test output'", output="test output\n")
    result = await call(create_bash_tool(tw.root, operations=tw.ops), command="echo 'test output'")
    assert text(result) == "test output\n"
    assert result.details is None


async def test_exit_codes(tw: ToolWorkspace) -> None:
    tw.script("exit 1", exit_code=1)
    tw.script("echo out; exit 3", output="out\n", exit_code=3)
    bash = create_bash_tool(tw.root, operations=tw.ops)
    assert await fail(bash, command="exit 1") == "(no output)\n\nCommand exited with code 1"
    assert await fail(bash, command="echo out; exit 3") == "out\n\n\nCommand exited with code 3"


async def test_timeout(tw: ToolWorkspace) -> None:
    async def sleeper(ctx: CommandContext) -> int:
        await ctx.emit("started\n")
        await ctx.sleep(30)
        return 0

    tw.script("echo started; sleep 30", sleeper)
    bash = create_bash_tool(tw.root, operations=tw.ops)
    message = await fail(bash, command="echo started; sleep 30", timeout=1.5)
    assert message == "started\n\n\nCommand timed out after 1.5 seconds"


async def test_abort(tw: ToolWorkspace) -> None:
    async def sleeper(ctx: CommandContext) -> int:
        await ctx.sleep(30)
        return 0

    tw.script("sleep 30", sleeper)
    controller = AbortController()
    asyncio.get_running_loop().call_later(0.2, controller.abort)
    bash = create_bash_tool(tw.root, operations=tw.ops)
    assert await fail(bash, controller.signal, command="sleep 30") == "Command aborted"
    assert await fail(bash, controller.signal, command="sleep 30") == "Command aborted"


async def test_signal_killed_shell_is_an_error(tw: ToolWorkspace) -> None:
    """Parity exception: the reference reports a shell killed by a signal as success."""
    tw.script("kill -9 $$", lambda ctx: -9)
    message = await fail(create_bash_tool(tw.root, operations=tw.ops), command="kill -9 $$")
    assert message == "(no output)\n\nCommand terminated without an exit code"


async def test_missing_working_directory(tw: ToolWorkspace) -> None:
    missing = tw.path("no-such-dir")
    bash = create_bash_tool(missing, operations=tw.ops)
    message = await fail(bash, command="echo hi")
    assert message == f"Working directory does not exist: {missing}\nCannot execute bash commands."


async def test_command_prefix(tw: ToolWorkspace) -> None:
    tw.script("export TEST_VAR=hello\necho $TEST_VAR", output="hello\n")
    tw.script("echo prefix-output\necho command-output", output="prefix-output\ncommand-output\n")
    bash = create_bash_tool(tw.root, operations=tw.ops, command_prefix="export TEST_VAR=hello")
    assert text(await call(bash, command="echo $TEST_VAR")) == "hello\n"
    prefixed = create_bash_tool(tw.root, operations=tw.ops, command_prefix="echo prefix-output")
    assert text(await call(prefixed, command="echo command-output")) == (
        "prefix-output\ncommand-output\n"
    )


async def test_spawn_hook_and_session_environment(tw: ToolWorkspace) -> None:
    tw.script("echo $PI_MODEL/$HOOKED", lambda ctx: _echo_env(ctx, "PI_MODEL", "HOOKED"))
    seen: list[SpawnContext] = []

    def hook(spawn: SpawnContext) -> SpawnContext:
        seen.append(spawn)
        return SpawnContext(spawn.command, spawn.cwd, {**spawn.env, "HOOKED": "yes"})

    definition_ctx = ToolContext(cwd=tw.root, model="test-model", session_id="s-1")
    from agent_side import wrap_tool_definition
    from agent_side.tools import create_bash_tool_definition

    bash = wrap_tool_definition(
        create_bash_tool_definition(tw.root, operations=tw.ops, spawn_hook=hook),
        lambda: definition_ctx,
    )
    assert text(await call(bash, command="echo $PI_MODEL/$HOOKED")) == "test-model/yes\n"
    assert seen[0].env["PI_SESSION_ID"] == "s-1"
    assert "PI_PROVIDER" not in seen[0].env


def _echo_env(ctx: CommandContext, *names: str) -> Awaitable[int]:
    async def run() -> int:
        await ctx.emit("/".join(ctx.env.get(n, "") for n in names) + "\n")
        return 0

    return run()


async def test_many_lines_truncated_with_full_output_file(tw: ToolWorkspace) -> None:
    async def lines(ctx: CommandContext) -> int:
        await ctx.emit("".join(f"line-{i}\n" for i in range(1, 4001)))
        return 0

    command = "for i in $(seq 1 4000); do echo line-$i; done"
    tw.script(command, lines)
    result = await call(create_bash_tool(tw.root, operations=tw.ops), command=command)
    out = text(result)
    assert out.startswith("line-2001\n") and "line-4000\n\n[Showing lines 2001-4000 of 4000." in out
    assert "line-2000\n" not in out
    path = result.details["fullOutputPath"]
    assert out.endswith(f"[Showing lines 2001-4000 of 4000. Full output: {path}]")
    # The path is in the workspace: the model reads it through the same backend, with `read`.
    assert path == f"{tw.root}/.opsbroker/outputs/{path.rsplit('/', 1)[1]}"
    saved = await tw.ops.read_file(path)
    assert saved == "".join(f"line-{i}\n" for i in range(1, 4001)).encode()
    read = text(await call(create_read_tool(tw.root, operations=tw.ops), path=path))
    assert read.startswith("line-1\nline-2\n")
    assert os.listdir(tempfile.gettempdir()) == []  # the local spill is gone
    truncation = result.details["truncation"]
    assert (truncation["totalLines"], truncation["outputLines"]) == (4000, 2000)


async def test_powershell_runs_on_the_backends_powershell(tw: ToolWorkspace) -> None:
    if tw.is_memory:
        tw.ops.powershell.commands.register("Write-Output hi", output="hi\r\n")
    tool = create_powershell_tool(tw.root, operations=tw.ops)
    assert tool.name == "powershell"
    assert tool.description.startswith("Execute a PowerShell command in the current working")
    try:
        result = await call(tool, command="Write-Output hi")
    except Exception as exc:  # a backend machine without PowerShell says so, as the reference
        assert str(exc) == (
            "No PowerShell executable found. Install PowerShell or add powershell.exe/pwsh.exe "
            "to PATH."
        )
    else:
        assert text(result).replace("\r", "") == "hi\n"


# --- custom operations (the reference's stubs) -----------------------------------------------


class ScriptedExec:
    """An ``exec`` that plays ``script(on_data, signal)`` and returns its result."""

    def __init__(self, script: Callable[[Any, AbortSignal | None], Awaitable[ExecResult]]) -> None:
        self.script = script

    async def exec(self, command: str, cwd: str, **options: Any) -> ExecResult:
        return await self.script(options["on_data"], options.get("signal"))


@pytest.mark.parametrize(
    ("reason", "status"),
    [(KillReason.TIMEOUT, "Command timed out after 5 seconds"), (KillReason.ABORTED, "Command aborted")],
)  # fmt: skip
async def test_killed_after_much_output_keeps_the_tail(reason: KillReason, status: str) -> None:
    async def script(on_data: Any, signal: Any) -> ExecResult:
        for i in range(1, 3001):
            on_data(f"{i}\n".encode())
        return ExecResult(None, reason)

    bash = create_bash_tool("/w", operations=ScriptedExec(script))
    message = await fail(bash, command="noisy", timeout=5)
    assert message.endswith(status)
    assert re.search(r"\[Showing lines \d+-\d+ of \d+\. Full output: /", message)
    path = re.search(r"Full output: (\S+)\]", message)
    assert path is not None
    data = _read_text(path.group(1))
    assert data.startswith("1\n2\n3\n") and data.endswith("2998\n2999\n3000\n")


async def test_updates_are_throttled() -> None:
    async def script(on_data: Any, signal: Any) -> ExecResult:
        for i in range(5000):
            on_data(f"line {i}\n".encode())
            if i % 500 == 0:
                await asyncio.sleep(0.03)
        return ExecResult(0)

    updates: list[AgentToolResult[Any]] = []
    bash = create_bash_tool("/w", operations=ScriptedExec(script))
    result = await call(bash, on_update=updates.append, command="burst")
    assert 2 <= len(updates) < 25
    assert updates[0].content == []
    assert "line 4999" in text(result)


async def test_split_utf8_and_late_output() -> None:
    late: list[Any] = []

    async def script(on_data: Any, signal: Any) -> ExecResult:
        euro = "€".encode()
        on_data(b"before " + euro[:1])
        on_data(euro[1:] + b"\n")
        late.append(on_data)
        return ExecResult(0)

    bash = create_bash_tool("/w", operations=ScriptedExec(script))
    result = await call(bash, command="x")
    late[0](b"after\n")
    assert text(result) == "before €\n"


async def test_invalid_timeouts() -> None:
    bash = create_bash_tool("/w", operations=ScriptedExec(lambda *_: _never()))
    assert await fail(bash, command="x", timeout=0) == (
        "Invalid timeout: must be a finite number of seconds"
    )
    assert await fail(bash, command="x", timeout=3_000_000) == (
        "Invalid timeout: maximum is 2147483.647 seconds"
    )


def _read_text(path: str) -> str:
    return Path(path).read_text()


async def _never() -> ExecResult:
    raise AssertionError("exec must not run")


def test_definitions_and_guidelines() -> None:
    bash = create_bash_tool("/w", operations=ScriptedExec(lambda *_: _never()))
    assert bash.prompt_guidelines == [
        "You can inspect PI_* environment variables for current model and session details."
    ]
    quiet = create_bash_tool(
        "/w", operations=ScriptedExec(lambda *_: _never()), expose_session_environment=False
    )
    assert quiet.prompt_guidelines is None
    assert bash.description == (
        "Execute a bash command in the current working directory. Returns stdout and stderr. "
        "Output is truncated to last 2000 lines or 50KB (whichever is hit first). If truncated, "
        "full output is saved to a temp file. Optionally provide a timeout in seconds."
    )


async def test_the_agents_environment_never_reaches_the_backend(
    tw: ToolWorkspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only additions travel with a command: the agent's own variables (an API key, say) stay
    with the agent, on every backend; the backend builds the base environment itself."""
    monkeypatch.setenv("AGENT_SECRET_TOKEN", "sk-do-not-send")
    tw.script(
        "echo $AGENT_SECRET_TOKEN/$PATH_SET",
        lambda ctx: _echo_env(ctx, "AGENT_SECRET_TOKEN", "PATH_SET"),
    )
    bash = create_bash_tool(tw.root, operations=tw.ops)
    output = text(await call(bash, command="echo $AGENT_SECRET_TOKEN/$PATH_SET"))
    assert "sk-do-not-send" not in output
