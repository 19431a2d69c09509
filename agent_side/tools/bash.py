"""The ``bash`` tool: a command through the backend's shell, its output tail and exit status."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import Field

from operations import AbortSignal, BashOperations

from .._messages import AgentToolResult
from .._schema import JsonNumber
from .._tool import (
    AgentTool,
    AgentToolUpdateCallback,
    ToolContext,
    ToolDefinition,
    wrap_tool_definition,
)
from ._shell import ShellRun, SpawnHook, run_shell_command
from ._tooldef import ToolParams, constrained_sampling
from ._truncate import DEFAULT_MAX_BYTES, DEFAULT_MAX_LINES
from ._workspace import Workspace

__all__ = ["BashParams", "create_bash_tool", "create_bash_tool_definition"]

DESCRIPTION = (
    "Execute a {shell} command in the current working directory. Returns stdout and stderr. "
    f"Output is truncated to last {DEFAULT_MAX_LINES} lines or {DEFAULT_MAX_BYTES // 1024}KB "
    "(whichever is hit first). If truncated, full output is saved to a temp file. Optionally "
    "provide a timeout in seconds."
)
SESSION_GUIDELINE = (
    "You can inspect PI_* environment variables for current model and session details."
)


class BashParams(ToolParams):
    command: str = Field(description="Shell command to execute")
    timeout: JsonNumber | None = Field(
        default=None, description="Timeout in seconds (optional, no default timeout)"
    )


def shell_tool_definition(
    *,
    name: str,
    shell: str,
    snippet: str,
    run: ShellRun,
    cwd_for: Callable[[ToolContext | None], str],
) -> ToolDefinition[BashParams, Any]:
    async def execute(
        tool_call_id: str,
        params: BashParams,
        signal: AbortSignal | None,
        on_update: AgentToolUpdateCallback[Any] | None,
        ctx: ToolContext | None,
    ) -> AgentToolResult[Any]:
        return await run_shell_command(
            run, params.command, params.timeout, cwd_for(ctx), signal, on_update, ctx
        )

    return ToolDefinition(
        name=name,
        label=name,
        description=DESCRIPTION.format(shell=shell),
        parameters=BashParams,
        execute=execute,
        prompt_snippet=snippet,
        prompt_guidelines=[SESSION_GUIDELINE] if run.expose_session_environment else None,
        constrained_sampling=constrained_sampling(),
    )


def create_bash_tool_definition(
    cwd: str,
    *,
    operations: BashOperations | None = None,
    command_prefix: str | None = None,
    shell_path: str | None = None,
    expose_session_environment: bool = True,
    spawn_hook: SpawnHook | None = None,
    env: Mapping[str, str] | None = None,
) -> ToolDefinition[BashParams, Any]:
    """The ``bash`` tool over ``operations.exec``.

    Args:
        command_prefix: prepended to every command as ``prefix + "\\n" + command``.
        shell_path: kept for the reference's signature; the backend chooses its shell, so it is
            only used by backends that accept one.
        expose_session_environment: set ``PI_SESSION_ID``, ``PI_MODEL``... from the call context.
        spawn_hook: sees and may replace ``SpawnContext(command, cwd, env)`` before the run.
        env: the commands' base environment; by default the agent's own (as the reference). Pass
            one explicitly when the backend is remote, so the agent's variables stay here.
    """
    ws = Workspace(cwd, operations, None)
    run = ShellRun(
        shell_name="bash",
        temp_file_prefix="pi-bash",
        shell=lambda: ws.ops,
        files=lambda: ws.ops,
        command_prefix=command_prefix,
        expose_session_environment=expose_session_environment,
        spawn_hook=spawn_hook,
        env=env,
    )
    return shell_tool_definition(
        name="bash",
        shell="bash",
        snippet="Execute bash commands (ls, grep, find, etc.)",
        run=run,
        cwd_for=ws.cwd_for,
    )


def create_bash_tool(
    cwd: str,
    *,
    operations: BashOperations | None = None,
    command_prefix: str | None = None,
    shell_path: str | None = None,
    expose_session_environment: bool = True,
    spawn_hook: SpawnHook | None = None,
    env: Mapping[str, str] | None = None,
) -> AgentTool[BashParams, Any]:
    """:func:`create_bash_tool_definition`, wrapped for the loop (with its prompt metadata)."""
    definition = create_bash_tool_definition(
        cwd,
        operations=operations,
        command_prefix=command_prefix,
        shell_path=shell_path,
        expose_session_environment=expose_session_environment,
        spawn_hook=spawn_hook,
        env=env,
    )
    tool = wrap_tool_definition(definition)
    tool.prompt_snippet = definition.prompt_snippet
    tool.prompt_guidelines = definition.prompt_guidelines
    return tool
