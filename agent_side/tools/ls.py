"""The ``ls`` tool: one directory's entries, sorted, directories marked with ``/``."""

from __future__ import annotations

import asyncio
import posixpath
import sys
from typing import Any

from pydantic import Field

from operations import AbortSignal, LsOperations, OpsError

from .._messages import AgentToolResult
from .._schema import JsonNumber
from .._tool import (
    AgentTool,
    AgentToolUpdateCallback,
    ToolContext,
    ToolDefinition,
    wrap_tool_definition,
)
from ._collation import collation_key
from ._errors import ToolError, abortable, describe_error
from ._tooldef import ToolParams, count_arg, text_result
from ._truncate import DEFAULT_MAX_BYTES, format_size, truncate_head
from ._workspace import Workspace

__all__ = ["LsParams", "create_ls_tool", "create_ls_tool_definition"]

DEFAULT_LIMIT = 500  # entries per listing
STAT_BATCH = 64  # entries stat-ed concurrently (one round trip each on a remote backend)
DESCRIPTION = (
    "List directory contents. Returns entries sorted alphabetically, with '/' suffix for "
    f"directories. Includes dotfiles. Output is truncated to {DEFAULT_LIMIT} entries or "
    f"{DEFAULT_MAX_BYTES // 1024}KB (whichever is hit first)."
)


class LsParams(ToolParams):
    path: str | None = Field(
        default=None, description="Directory to list (default: current directory)"
    )
    limit: JsonNumber | None = Field(
        default=None, description="Maximum number of entries to return (default: 500)"
    )


def create_ls_tool_definition(
    cwd: str, *, operations: LsOperations | None = None, home: str | None = None
) -> ToolDefinition[LsParams, Any]:
    """The ``ls`` tool over ``operations`` (``exists``, ``stat``, ``readdir``).

    Entries whose ``stat`` fails (a dangling or escaping link) are left out and do not count
    toward the limit.
    """
    ws = Workspace(cwd, operations, home)

    async def execute(
        tool_call_id: str,
        params: LsParams,
        signal: AbortSignal | None,
        on_update: AgentToolUpdateCallback[Any] | None,
        ctx: ToolContext | None,
    ) -> AgentToolResult[Any]:
        async with abortable(signal):
            directory = await ws.existing(params.path, ctx)
            limit = count_arg(params.limit)
            limit = DEFAULT_LIMIT if limit is None else limit
            try:
                stat = await ws.ops.stat(directory)
            except OpsError as exc:
                raise ToolError(describe_error(exc, "stat", directory)) from None
            if not stat.is_directory:
                raise ToolError(f"Not a directory: {directory}")
            try:
                names: list[str] = await ws.ops.readdir(directory)
            except OpsError as exc:
                message = describe_error(exc, "scandir", directory)
                raise ToolError(f"Cannot read directory: {message}") from None
            names.sort(key=collation_key)
            entries, limit_reached = await _stat_entries(ws.ops, directory, names, limit)
        if not entries:
            return text_result("(empty directory)")
        truncation = truncate_head("\n".join(entries), max_lines=sys.maxsize)
        notices: list[str] = []
        details: dict[str, Any] = {}
        if limit_reached:
            notices.append(f"{limit} entries limit reached. Use limit={limit * 2} for more")
            details["entryLimitReached"] = limit
        if truncation.truncated:
            notices.append(f"{format_size(DEFAULT_MAX_BYTES)} limit reached")
            details["truncation"] = truncation.to_json()
        text = truncation.content
        if notices:
            text += f"\n\n[{'. '.join(notices)}]"
        return text_result(text, details)

    return ToolDefinition(
        name="ls",
        label="ls",
        description=DESCRIPTION,
        parameters=LsParams,
        execute=execute,
        prompt_snippet="List directory contents",
    )


async def _stat_entries(
    ops: LsOperations, directory: str, names: list[str], limit: int
) -> tuple[list[str], bool]:
    """The first ``limit`` names that stat, ``/``-suffixed for directories; and whether more."""

    async def kind(name: str) -> bool | None:
        try:
            stat = await ops.stat(posixpath.join(directory, name))
        except OpsError:
            return None
        return bool(stat.is_directory)

    entries: list[str] = []
    for start in range(0, len(names), STAT_BATCH):
        batch = names[start : start + STAT_BATCH]
        kinds = await asyncio.gather(*(kind(n) for n in batch))
        for name, is_dir in zip(batch, kinds, strict=True):
            if len(entries) >= limit:
                return entries, True
            if is_dir is not None:
                entries.append(name + "/" if is_dir else name)
    return entries, False


def create_ls_tool(
    cwd: str, *, operations: LsOperations | None = None, home: str | None = None
) -> AgentTool[LsParams, Any]:
    """:func:`create_ls_tool_definition`, wrapped for the loop."""
    return wrap_tool_definition(create_ls_tool_definition(cwd, operations=operations, home=home))
