"""The ``powershell`` tool: ``bash``'s contract, run through the backend's PowerShell."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operations import PowerShellOperations

from .._tool import AgentTool, ToolDefinition, wrap_tool_definition
from ._shell import ShellRun, SpawnHook
from ._workspace import PowerShellHost, Workspace
from .bash import BashParams, shell_tool_definition

__all__ = ["create_powershell_tool", "create_powershell_tool_definition"]


def create_powershell_tool_definition(
    cwd: str,
    *,
    operations: PowerShellOperations | PowerShellHost | None = None,
    expose_session_environment: bool = True,
    spawn_hook: SpawnHook | None = None,
    env: Mapping[str, str] | None = None,
) -> ToolDefinition[BashParams, Any]:
    """The ``powershell`` tool over ``operations.powershell.exec`` (or ``operations.exec`` when
    ``operations`` is itself a :class:`~operations.PowerShellOperations`).

    There is no ``command_prefix`` or ``shell_path``, as in the reference; the backend adds the
    UTF-8 output-encoding line itself, so ``spawn_hook`` sees the command as the model sent it.
    """
    ws: Workspace[PowerShellOperations | PowerShellHost] = Workspace(cwd, operations, None)

    def shell() -> PowerShellOperations:
        ops = ws.ops
        if isinstance(ops, PowerShellHost):
            return ops.powershell
        return ops

    run = ShellRun(
        shell_name="PowerShell",
        temp_file_prefix="pi-powershell",
        shell=shell,
        files=lambda: ws.ops,
        command_prefix=None,
        expose_session_environment=expose_session_environment,
        spawn_hook=spawn_hook,
        env=env,
    )
    return shell_tool_definition(
        name="powershell",
        shell="PowerShell",
        snippet="Execute PowerShell commands",
        run=run,
        cwd_for=ws.cwd_for,
    )


def create_powershell_tool(
    cwd: str,
    *,
    operations: PowerShellOperations | PowerShellHost | None = None,
    expose_session_environment: bool = True,
    spawn_hook: SpawnHook | None = None,
    env: Mapping[str, str] | None = None,
) -> AgentTool[BashParams, Any]:
    """:func:`create_powershell_tool_definition`, wrapped for the loop."""
    definition = create_powershell_tool_definition(
        cwd,
        operations=operations,
        expose_session_environment=expose_session_environment,
        spawn_hook=spawn_hook,
        env=env,
    )
    tool = wrap_tool_definition(definition)
    tool.prompt_snippet = definition.prompt_snippet
    tool.prompt_guidelines = definition.prompt_guidelines
    return tool
