"""Fake tools and an event recorder for the runtime tests (no backend needed)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel

from agent_side import (
    AgentEvent,
    AgentTool,
    AgentToolResult,
    AgentToolUpdateCallback,
    AssistantMessage,
    StopReason,
    TextContent,
    ToolCall,
)
from operations import AbortSignal

Execute = Callable[
    [str, Any, AbortSignal | None, AgentToolUpdateCallback[Any] | None],
    Awaitable[AgentToolResult[Any]],
]


class ValueParams(BaseModel):
    """The reference tests' schema: one required string."""

    value: str


def text_result(text: str, **fields: Any) -> AgentToolResult[Any]:
    return AgentToolResult[Any](content=[TextContent(text=text)], details={}, **fields)


def echo_tool(name: str = "echo", **options: Any) -> AgentTool[Any, Any]:
    """A tool returning ``echoed: <value>``; records the params it received in ``calls``."""
    calls: list[Any] = []

    async def execute(
        tool_call_id: str,
        params: Any,
        signal: AbortSignal | None,
        on_update: AgentToolUpdateCallback[Any] | None,
    ) -> AgentToolResult[Any]:
        calls.append(params)
        return AgentToolResult[Any](
            content=[TextContent(text=f"echoed: {params.value}")], details={"value": params.value}
        )

    tool: AgentTool[Any, Any] = AgentTool(
        name=name, description=f"{name} tool", parameters=ValueParams, execute=execute, **options
    )
    tool.calls = calls  # type: ignore[attr-defined]
    return tool


def tool_with(name: str, execute: Execute, **options: Any) -> AgentTool[Any, Any]:
    return AgentTool(
        name=name, description=f"{name} tool", parameters=ValueParams, execute=execute, **options
    )


def assistant(
    *calls: tuple[str, str, dict[str, Any]], stop: StopReason = "toolUse"
) -> AssistantMessage:
    """An assistant message with ``(id, name, arguments)`` tool calls."""
    return AssistantMessage(
        content=[
            TextContent(text="working on it"),
            *(ToolCall(id=i, name=n, arguments=a) for i, n, a in calls),
        ],
        stop_reason=stop,
    )


class Recorder:
    """Collects events; ``trace()`` gives compact ``type:id`` strings for order assertions."""

    def __init__(self) -> None:
        self.events: list[AgentEvent] = []

    def __call__(self, event: AgentEvent) -> None:
        self.events.append(event)

    def trace(self) -> list[str]:
        out = []
        for event in self.events:
            if event.type.startswith("message_"):
                message = event.message  # type: ignore[union-attr]
                out.append(f"{event.type}:{getattr(message, 'tool_call_id', message.role)}")
            else:
                out.append(f"{event.type}:{event.tool_call_id}")  # type: ignore[union-attr]
        return out

    def of_type(self, kind: str) -> list[Any]:
        return [event for event in self.events if event.type == kind]
