"""The ``find`` tool: paths matching a glob, searched where the files are (the backend's ``glob``)."""

from __future__ import annotations

import posixpath
import sys
from typing import Any

from pydantic import BaseModel, Field

from operations import AbortSignal, FindOperations, OpsError

from .._messages import AgentToolResult
from .._schema import JsonNumber
from .._tool import (
    AgentTool,
    AgentToolUpdateCallback,
    ToolContext,
    ToolDefinition,
    wrap_tool_definition,
)
from ._errors import ToolError, abortable
from ._tooldef import int_arg, text_result
from ._truncate import DEFAULT_MAX_BYTES, format_size, truncate_head
from ._workspace import Workspace

__all__ = [
    "FindParams",
    "create_find_tool",
    "create_find_tool_definition",
    "relativize_find_result_path",
]

DEFAULT_LIMIT = 1000  # paths per result
IGNORED = ("**/node_modules/**", "**/.git/**")  # never worth listing, as the reference
DESCRIPTION = (
    "Search for files by glob pattern. Returns matching file paths relative to the search "
    "directory. Respects .gitignore. Output is truncated to "
    f"{DEFAULT_LIMIT} results or {DEFAULT_MAX_BYTES // 1024}KB (whichever is hit first)."
)


class FindParams(BaseModel):
    pattern: str = Field(
        description="Glob pattern to match files, e.g. '*.ts', '**/*.json', or 'src/**/*.spec.ts'"
    )
    path: str | None = Field(
        default=None, description="Directory to search in (default: current directory)"
    )
    limit: JsonNumber | None = Field(
        default=None, description="Maximum number of results (default: 1000)"
    )


def relativize_find_result_path(result: str, search_path: str) -> str:
    """A result as the model sees it: relative to ``search_path``, ``/``-separated, a trailing
    ``/`` kept (directories)."""
    directory = result.endswith("/")
    if result.startswith("/"):
        result = posixpath.relpath(result, search_path) if result != search_path else ""
    result = result.rstrip("/")
    return result + "/" if directory else result


def create_find_tool_definition(
    cwd: str, *, operations: FindOperations | None = None, home: str | None = None
) -> ToolDefinition[FindParams, Any]:
    """The ``find`` tool over ``operations`` (``exists``, ``glob``).

    The glob dialect is fd's as the reference runs it (see ``operations._glob``): a pattern
    without ``/`` matches names at any depth, hidden files are included, ``.gitignore`` is
    respected, ``node_modules`` and ``.git`` are skipped.
    """
    ws = Workspace(cwd, operations, home)

    async def execute(
        tool_call_id: str,
        params: FindParams,
        signal: AbortSignal | None,
        on_update: AgentToolUpdateCallback[Any] | None,
        ctx: ToolContext | None,
    ) -> AgentToolResult[Any]:
        async with abortable(signal):
            search_path = await ws.existing(params.path, ctx)
            limit = int_arg(params.limit)
            limit = DEFAULT_LIMIT if limit is None else limit
            try:
                results: list[str] = await ws.ops.glob(
                    params.pattern, search_path, ignore=list(IGNORED), limit=limit
                )
            except OpsError as exc:
                raise ToolError(exc.reason) from None
        if not results:
            return text_result("No files found matching pattern")
        lines = [relativize_find_result_path(r, search_path) for r in results]
        truncation = truncate_head("\n".join(lines), max_lines=sys.maxsize)
        notices: list[str] = []
        details: dict[str, Any] = {}
        if len(results) >= limit:
            notices.append(
                f"{limit} results limit reached. Use limit={limit * 2} for more, or refine pattern"
            )
            details["resultLimitReached"] = limit
        if truncation.truncated:
            notices.append(f"{format_size(DEFAULT_MAX_BYTES)} limit reached")
            details["truncation"] = truncation.to_json()
        text = truncation.content
        if notices:
            text += f"\n\n[{'. '.join(notices)}]"
        return text_result(text, details)

    return ToolDefinition(
        name="find",
        label="find",
        description=DESCRIPTION,
        parameters=FindParams,
        execute=execute,
        prompt_snippet="Find files by glob pattern (respects .gitignore)",
    )


def create_find_tool(
    cwd: str, *, operations: FindOperations | None = None, home: str | None = None
) -> AgentTool[FindParams, Any]:
    """:func:`create_find_tool_definition`, wrapped for the loop."""
    return wrap_tool_definition(create_find_tool_definition(cwd, operations=operations, home=home))
