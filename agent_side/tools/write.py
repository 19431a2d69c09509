"""The ``write`` tool: create or replace a whole file, creating its parent directories."""

from __future__ import annotations

import posixpath
from typing import Any

from pydantic import Field

from operations import AbortSignal, OpsError, WriteOperations

from .._messages import AgentToolResult
from .._tool import (
    AgentTool,
    AgentToolUpdateCallback,
    ToolContext,
    ToolDefinition,
    wrap_tool_definition,
)
from ._errors import ToolError, check_aborted, describe_error
from ._queue import in_mutation_queue
from ._tooldef import ToolParams, constrained_sampling, text_result
from ._workspace import Workspace

__all__ = ["WriteParams", "create_write_tool", "create_write_tool_definition"]

DESCRIPTION = (
    "Write content to a file. Creates the file if it doesn't exist, overwrites if it does. "
    "Automatically creates parent directories."
)


class WriteParams(ToolParams):
    path: str = Field(description="Path to the file to write (relative or absolute)")
    content: str = Field(description="Content to write to the file")


def create_write_tool_definition(
    cwd: str, *, operations: WriteOperations | None = None, home: str | None = None
) -> ToolDefinition[WriteParams, Any]:
    """The ``write`` tool over ``operations`` (``mkdir``, ``write_file``).

    The content is written verbatim (UTF-8; no BOM or line-ending handling), inside the per-file
    mutation queue. An abort is honoured between steps, never in the middle of one: a write
    already sent completes, and the call then fails with ``Operation aborted``.
    """
    ws = Workspace(cwd, operations, home)

    async def execute(
        tool_call_id: str,
        params: WriteParams,
        signal: AbortSignal | None,
        on_update: AgentToolUpdateCallback[Any] | None,
        ctx: ToolContext | None,
    ) -> AgentToolResult[Any]:
        path = ws.resolve(params.path, ctx)
        parent = posixpath.dirname(path)

        async def write() -> AgentToolResult[Any]:
            check_aborted(signal)
            try:
                await ws.ops.mkdir(parent)
            except OpsError as exc:
                raise ToolError(describe_error(exc, "mkdir", parent)) from None
            check_aborted(signal)
            try:
                await ws.ops.write_file(path, params.content)
            except OpsError as exc:
                raise ToolError(describe_error(exc, "open", path)) from None
            check_aborted(signal)
            return text_result(f"Successfully wrote to {params.path}")

        return await in_mutation_queue(ws, path, write)

    return ToolDefinition(
        name="write",
        label="write",
        description=DESCRIPTION,
        parameters=WriteParams,
        execute=execute,
        prompt_snippet="Create or overwrite files",
        prompt_guidelines=["Use write only for new files or complete rewrites."],
        constrained_sampling=constrained_sampling(),
    )


def create_write_tool(
    cwd: str, *, operations: WriteOperations | None = None, home: str | None = None
) -> AgentTool[WriteParams, Any]:
    """:func:`create_write_tool_definition`, wrapped for the loop."""
    return wrap_tool_definition(create_write_tool_definition(cwd, operations=operations, home=home))
