"""The ``mcp`` SDK's own client on ``python -m opsbroker mcp ...``, and the loop beside it.

:func:`mcp_session` spawns the server as an MCP client would (stdio, the SDK's
``stdio_client``); :func:`direct_call` runs the same call through ``execute_tool_calls`` on the
same kind of backend. :func:`mcp_bytes` and :func:`loop_bytes` give both results as the same JSON
bytes (content blocks, then the error flag), compared byte for byte.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client

from agent_side.loop import AssistantMessage, ToolCall, ToolResultMessage, execute_tool_calls
from tests.cli._run import REPO, cli_env

CALL_TIMEOUT_S = 60.0  # one call on a loaded machine; a hang fails the test instead


def server_parameters(*args: str) -> StdioServerParameters:
    """``python -m opsbroker mcp ARGS`` with the source tree importable."""
    return StdioServerParameters(
        command=sys.executable, args=["-m", "opsbroker", "mcp", *args], env=cli_env(), cwd=REPO
    )


@asynccontextmanager
async def mcp_session(*args: str) -> AsyncIterator[ClientSession]:
    """An initialised SDK client session on a fresh ``opsbroker mcp ARGS`` subprocess."""
    with open(os.devnull, "w") as errlog:  # noqa: ASYNC230 (opened once, never blocks)
        async with (
            stdio_client(server_parameters(*args), errlog=errlog) as (read, write),
            ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT_S) as session,
        ):
            await session.initialize()
            yield session


def mcp_bytes(result: types.CallToolResult) -> bytes:
    """An MCP result as comparable bytes: its blocks (``type``, ``text`` / ``data``,
    ``mimeType``) and ``isError``."""
    blocks = [block.model_dump(by_alias=True, exclude_none=True) for block in result.content]
    return json.dumps({"content": blocks, "isError": result.is_error}, sort_keys=True).encode()


def loop_bytes(message: ToolResultMessage[Any]) -> bytes:
    """A result message as the same bytes as :func:`mcp_bytes`."""
    wire = message.to_wire()
    return json.dumps(
        {"content": wire["content"], "isError": wire["isError"]}, sort_keys=True
    ).encode()


async def direct_call(tools: Sequence[Any], name: str, arguments: dict[str, Any]) -> bytes:
    """``name(arguments)`` through ``execute_tool_calls``, as :func:`loop_bytes`."""
    message = AssistantMessage(
        content=[ToolCall(id="call_direct", name=name, arguments=arguments)], stop_reason="toolUse"
    )
    batch = await execute_tool_calls(list(tools), message)
    (result,) = batch.messages
    return loop_bytes(result)
