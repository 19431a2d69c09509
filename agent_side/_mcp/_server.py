"""The MCP server over the tool runtime: ``tools/list`` and ``tools/call``, nothing else.

Every ``tools/call`` is one assistant message with one tool call, handed to
:func:`agent_side.loop.execute_tool_calls`, the path a model's calls take: argument preparation,
validation with its coercions and texts, execution, the result message. The MCP result is that
message's content (:func:`~agent_side._mcp._results.call_tool_result`), so a client sees the
bytes a model would.

**Progress.** When the request carries a ``progressToken``, each partial result the tool reports
(``bash`` and ``powershell``: the output so far, at most ten times a second) becomes one
``notifications/progress`` whose ``message`` is the partial text, in the order reported.

**Cancellation:** ``notifications/cancelled`` cancels the task running the call. The
cancellation reaches the backend's ``exec``, which kills the command's whole process tree
(the one kill path, as for a timeout or a vanished gRPC client) before the task ends; no result
is sent, as the protocol says.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext

from .._loop import execute_tool_calls
from .._messages import (
    AgentEvent,
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolExecutionUpdateEvent,
)
from .._tool import AgentTool
from ._results import call_tool_result, mcp_tool
from ._stdio import stdio_transport

__all__ = ["SERVER_NAME", "build_server", "serve_stdio"]

SERVER_NAME = "opsbroker"
"""The name the server gives in ``initialize`` (clients show it)."""

INSTRUCTIONS = (
    "File and shell tools confined to one workspace root by opsbroker: paths outside the root "
    "are refused, commands run with timeouts and are killed with their whole process tree."
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("opsbroker")
    except PackageNotFoundError:
        return "0"


class _Progress:
    """The partial results of one call, sent as progress notifications in the order reported."""

    def __init__(self, ctx: ServerRequestContext[Any]) -> None:
        self._ctx = ctx
        self._count = 0
        self._last: asyncio.Future[None] | None = None

    def __call__(self, event: AgentEvent) -> asyncio.Future[None] | None:
        if not isinstance(event, ToolExecutionUpdateEvent):
            return None
        text = "".join(
            block.text for block in event.partial_result.content if isinstance(block, TextContent)
        )
        self._count += 1
        self._last = asyncio.ensure_future(self._send(self._last, float(self._count), text))
        return self._last

    async def _send(self, previous: asyncio.Future[None] | None, count: float, text: str) -> None:
        if previous is not None:
            await previous
        await self._ctx.session.report_progress(count, None, text)


def build_server(tools: Sequence[AgentTool[Any, Any]]) -> Server[Any]:
    """An MCP server that lists ``tools`` and runs each call through the tool loop."""
    listed = types.ListToolsResult(tools=[mcp_tool(tool) for tool in tools])

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return listed

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        message = AssistantMessage(
            content=[
                ToolCall(
                    id=f"mcp_{ctx.request_id}", name=params.name, arguments=params.arguments or {}
                )
            ],
            stop_reason="toolUse",
        )
        batch = await execute_tool_calls(tools, message, emit=_Progress(ctx))
        (result,) = batch.messages
        return call_tool_result(result)

    return Server(
        SERVER_NAME,
        version=_version(),
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve_stdio(tools: Sequence[AgentTool[Any, Any]]) -> None:
    """Serve ``tools`` over this process's stdin and stdout until the client closes stdin."""
    server = build_server(tools)
    async with stdio_transport() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
