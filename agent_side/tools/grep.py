"""The ``grep`` tool: matching lines with paths and line numbers, searched where the files are."""

from __future__ import annotations

import posixpath
import sys
from typing import Any, Protocol, runtime_checkable

from pydantic import Field

from operations import (
    AbortSignal,
    EscapesRoot,
    GrepOperations,
    OpsError,
    PolicyDenied,
    SearchMatch,
)

from .._messages import AgentToolResult
from .._schema import JsonNumber
from .._tool import (
    AgentTool,
    AgentToolUpdateCallback,
    ToolContext,
    ToolDefinition,
    wrap_tool_definition,
)
from ._errors import ToolError, abortable, describe_error
from ._tooldef import ToolParams, count_arg, int_arg, text_result
from ._truncate import (
    DEFAULT_MAX_BYTES,
    GREP_MAX_LINE_LENGTH,
    format_size,
    truncate_head,
    truncate_line,
)
from ._workspace import Workspace

__all__ = ["GrepParams", "create_grep_tool", "create_grep_tool_definition"]

DEFAULT_LIMIT = 100  # matching lines per result
DESCRIPTION = (
    "Search file contents for a pattern. Returns matching lines with file paths and line "
    "numbers. Respects .gitignore. Output is truncated to "
    f"{DEFAULT_LIMIT} matches or {DEFAULT_MAX_BYTES // 1024}KB (whichever is hit first). "
    f"Long lines are truncated to {GREP_MAX_LINE_LENGTH} chars."
)


@runtime_checkable
class _Closable(Protocol):
    """A search stream that can be stopped early (every backend's is an async generator)."""

    async def aclose(self) -> None: ...


class GrepParams(ToolParams):
    pattern: str = Field(description="Search pattern (regex or literal string)")
    path: str | None = Field(
        default=None, description="Directory or file to search (default: current directory)"
    )
    glob: str | None = Field(
        default=None, description="Filter files by glob pattern, e.g. '*.ts' or '**/*.spec.ts'"
    )
    ignoreCase: bool | None = Field(
        default=None, description="Case-insensitive search (default: false)"
    )
    literal: bool | None = Field(
        default=None,
        description="Treat pattern as literal string instead of regex (default: false)",
    )
    context: JsonNumber | None = Field(
        default=None,
        description="Number of lines to show before and after each match (default: 0)",
    )
    limit: JsonNumber | None = Field(
        default=None, description="Maximum number of matches to return (default: 100)"
    )


def create_grep_tool_definition(
    cwd: str, *, operations: GrepOperations | None = None, home: str | None = None
) -> ToolDefinition[GrepParams, Any]:
    """The ``grep`` tool over ``operations`` (``is_directory``, ``search``, ``read_file``).

    The search runs on the backend (see ``operations._search`` for the dialect and the rules);
    only context lines and undecodable match lines are read back here.
    """
    ws = Workspace(cwd, operations, home)

    async def execute(
        tool_call_id: str,
        params: GrepParams,
        signal: AbortSignal | None,
        on_update: AgentToolUpdateCallback[Any] | None,
        ctx: ToolContext | None,
    ) -> AgentToolResult[Any]:
        async with abortable(signal):
            search_path = ws.resolve(params.path or ".", ctx)
            context = int_arg(params.context) or 0
            context = max(context, 0)
            requested = count_arg(params.limit)
            limit = max(1, DEFAULT_LIMIT if requested is None else requested)
            try:
                is_dir = bool(await ws.ops.is_directory(search_path))
            except (EscapesRoot, PolicyDenied) as exc:  # refused, as a read of it is
                raise ToolError(describe_error(exc, "stat", search_path)) from None
            except OpsError:
                raise ToolError(f"Path not found: {search_path}") from None
            matches: list[SearchMatch] = []
            try:
                stream = ws.ops.search(
                    params.pattern,
                    search_path,
                    glob=params.glob,
                    ignore_case=bool(params.ignoreCase),
                    literal=bool(params.literal),
                    limit=limit,
                )
                try:
                    async for match in stream:
                        matches.append(match)
                        if len(matches) >= limit:
                            break
                finally:
                    if isinstance(stream, _Closable):
                        await stream.aclose()  # stops the search where it runs
            except OpsError as exc:
                raise ToolError(exc.reason) from None
            if not matches:
                return text_result("No matches found")
            lines, cut = await _format(ws.ops, matches, search_path, is_dir, context)
        truncation = truncate_head("\n".join(lines), max_lines=sys.maxsize)
        notices: list[str] = []
        details: dict[str, Any] = {}
        if len(matches) >= limit:
            notices.append(
                f"{limit} matches limit reached. Use limit={limit * 2} for more, or refine pattern"
            )
            details["matchLimitReached"] = limit
        if truncation.truncated:
            notices.append(f"{format_size(DEFAULT_MAX_BYTES)} limit reached")
            details["truncation"] = truncation.to_json()
        if cut:
            notices.append(
                f"Some lines truncated to {GREP_MAX_LINE_LENGTH} chars. Use read tool to see full "
                "lines"
            )
            details["linesTruncated"] = True
        text = truncation.content
        if notices:
            text += f"\n\n[{'. '.join(notices)}]"
        return text_result(text, details)

    return ToolDefinition(
        name="grep",
        label="grep",
        description=DESCRIPTION,
        parameters=GrepParams,
        execute=execute,
        prompt_snippet="Search file contents for patterns (respects .gitignore)",
    )


async def _format(
    ops: GrepOperations,
    matches: list[SearchMatch],
    search_path: str,
    is_dir: bool,
    context: int,
) -> tuple[list[str], bool]:
    """The output lines (``path:n: text`` for matches, ``path-n- text`` for context)."""
    files: dict[str, list[str]] = {}
    out: list[str] = []
    any_cut = False

    def shown(text: str) -> str:
        nonlocal any_cut
        line, cut = truncate_line(text.replace("\r", ""))
        any_cut = any_cut or cut
        return line

    for match in matches:
        name = _display_path(match.path, search_path, is_dir)
        if context == 0 and match.line_text is not None:
            text = match.line_text.replace("\r\n", "\n").replace("\r", "")
            text = text.removesuffix("\n")
            out.append(f"{name}:{match.line_number}: {shown(text)}")
            continue
        if match.path not in files:
            files[match.path] = await _file_lines(ops, match.path)
        lines = files[match.path]
        if not lines:
            out.append(f"{name}:{match.line_number}: (unable to read file)")
            continue
        n = match.line_number
        for k in range(max(1, n - context), min(len(lines), n + context) + 1):
            sep = ":" if k == n else "-"
            out.append(f"{name}{sep}{k}{sep} {shown(lines[k - 1])}")
    return out, any_cut


async def _file_lines(ops: GrepOperations, path: str) -> list[str]:
    try:
        data: bytes = await ops.read_file(path)
    except OpsError:
        return []
    text = data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    return text.split("\n") if text else []


def _display_path(path: str, search_path: str, is_dir: bool) -> str:
    if is_dir:
        rel = posixpath.relpath(path, search_path)
        if rel and rel != "." and not rel.startswith(".."):
            return rel
    return posixpath.basename(path)


def create_grep_tool(
    cwd: str, *, operations: GrepOperations | None = None, home: str | None = None
) -> AgentTool[GrepParams, Any]:
    """:func:`create_grep_tool_definition`, wrapped for the loop."""
    return wrap_tool_definition(create_grep_tool_definition(cwd, operations=operations, home=home))
