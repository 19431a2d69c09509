"""Calling a tool the way the loop does: prepare, validate, execute; failures as their text."""

from __future__ import annotations

from typing import Any

from agent_side import AgentTool, AgentToolResult, ToolCall
from agent_side._validate import validate_tool_arguments
from operations import AbortSignal


async def call(
    tool: AgentTool[Any, Any],
    signal: AbortSignal | None = None,
    on_update: Any = None,
    **args: Any,
) -> AgentToolResult[Any]:
    if tool.prepare_arguments is not None:
        args = tool.prepare_arguments(args)
    params = validate_tool_arguments(tool, ToolCall(id="call-1", name=tool.name, arguments=args))
    return await tool.execute("call-1", params, signal, on_update)


async def fail(tool: AgentTool[Any, Any], signal: AbortSignal | None = None, **args: Any) -> str:
    """The error text the model would see; fails the test if the call succeeds."""
    try:
        result = await call(tool, signal, **args)
    except Exception as exc:
        return str(exc)
    raise AssertionError(f"{tool.name} succeeded: {text(result)!r}")


def text(result: AgentToolResult[Any]) -> str:
    first = result.content[0]
    assert first.type == "text"
    return first.text
