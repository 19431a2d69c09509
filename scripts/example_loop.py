"""Run one assistant message with three tool calls through ``execute_tool_calls``.

    python scripts/example_loop.py

Three small tools over the in-memory backend (``connect("memory:")``): ``write`` (serialised per
file through the mutation queue, keyed in the backend's namespace), ``read`` (slow, so it
finishes last) and ``count``. ``count`` gets a numeric string, which validation coerces. Each event is printed as its wire JSON
(timestamps dropped so the output is stable): the end events arrive in completion order, the
result messages in the message's order.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
from typing import Any

from pydantic import BaseModel, Field

from agent_side import (
    AgentEvent,
    AgentTool,
    AgentToolResult,
    AgentToolUpdateCallback,
    AssistantMessage,
    JsonNumber,
    TextContent,
    ToolCall,
    connect,
    with_file_mutation_queue,
)
from agent_side.loop import execute_tool_calls
from operations import AbortSignal, Backend


class WriteParams(BaseModel):
    path: str = Field(description="File to write, relative to the workspace root")
    content: str = Field(description="Text to write")


class ReadParams(BaseModel):
    path: str = Field(description="File to read, relative to the workspace root")


class CountParams(BaseModel):
    path: str = Field(description="File whose lines to count")
    at_least: JsonNumber | None = Field(default=None, description="Fail below this many lines")


def make_tools(ws: Backend) -> list[AgentTool[Any, Any]]:
    """The three tools, working on ``ws`` (any backend: memory, local, gRPC, SSH)."""

    def resolve(path: str) -> str:
        return posixpath.join(ws.root, path)

    async def write(
        tool_call_id: str,
        params: WriteParams,
        signal: AbortSignal | None,
        on_update: AgentToolUpdateCallback[dict[str, Any]] | None,
    ) -> AgentToolResult[dict[str, Any]]:
        target = resolve(params.path)

        async def mutate() -> None:
            await ws.write_file(target, params.content)

        await with_file_mutation_queue(target, mutate, namespace=ws)
        return AgentToolResult(
            content=[TextContent(text=f"Wrote {len(params.content)} bytes to {params.path}")],
            details={"path": params.path},
        )

    async def read(
        tool_call_id: str,
        params: ReadParams,
        signal: AbortSignal | None,
        on_update: AgentToolUpdateCallback[dict[str, Any]] | None,
    ) -> AgentToolResult[dict[str, Any]]:
        if on_update is not None:
            on_update(AgentToolResult(content=[TextContent(text="reading...")], details={}))
        await asyncio.sleep(0.05)
        text = (await ws.read_file(resolve(params.path))).decode()
        return AgentToolResult(content=[TextContent(text=text)], details={})

    async def count(
        tool_call_id: str,
        params: CountParams,
        signal: AbortSignal | None,
        on_update: AgentToolUpdateCallback[dict[str, Any]] | None,
    ) -> AgentToolResult[dict[str, Any]]:
        lines = (await ws.read_file(resolve(params.path))).count(b"\n")
        if params.at_least is not None and lines < params.at_least:
            raise ValueError(f"{params.path} has {lines} lines, fewer than {params.at_least}")
        return AgentToolResult(
            content=[TextContent(text=f"{params.path}: {lines} lines")], details={"lines": lines}
        )

    return [
        AgentTool(name="write", description="Write a file", parameters=WriteParams, execute=write),
        AgentTool(name="read", description="Read a file", parameters=ReadParams, execute=read),
        AgentTool(name="count", description="Count lines", parameters=CountParams, execute=count),
    ]


def show(event: AgentEvent) -> None:
    wire = event.to_wire()
    if isinstance(wire.get("message"), dict):
        wire["message"].pop("timestamp", None)
    print(json.dumps(wire))


async def main() -> None:
    message = AssistantMessage(
        content=[
            TextContent(text="Let me look at the notes."),
            ToolCall(id="call_1", name="read", arguments={"path": "notes.txt"}),
            ToolCall(
                id="call_2", name="write", arguments={"path": "todo.txt", "content": "ship\n"}
            ),
            ToolCall(id="call_3", name="count", arguments={"path": "notes.txt", "at_least": "2"}),
        ],
        stop_reason="toolUse",
    )
    async with connect("memory:") as ws:
        await ws.write_file(posixpath.join(ws.root, "notes.txt"), "alpha\nbeta\ngamma\n")
        batch = await execute_tool_calls(make_tools(ws), message, emit=show)
    print(
        f"results in order: {[m.tool_call_id for m in batch.messages]}; terminate={batch.terminate}"
    )


if __name__ == "__main__":
    asyncio.run(main())
