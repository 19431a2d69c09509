"""The ``find`` tool: paths matching a glob, searched where the files are (the backend's ``glob``)."""

from __future__ import annotations

import posixpath
import sys
from typing import Any

from pydantic import Field

from operations import (
    AbortSignal,
    FindOperations,
    InvalidArgument,
    NotADirectory,
    OpsError,
    compile_glob,
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
from ._errors import ToolError, abortable
from ._tooldef import ToolParams, count_arg, text_result
from ._truncate import DEFAULT_MAX_BYTES, format_size, truncate_head
from ._workspace import Workspace

__all__ = [
    "FindParams",
    "create_find_tool",
    "create_find_tool_definition",
    "relativize_find_result_path",
]

DEFAULT_LIMIT = 1000  # paths per result
UNLIMITED = 2**63 - 1  # what fd's ``--max-results 0`` means; the wire's int64 maximum
IGNORED = ("**/node_modules/**", "**/.git/**")  # never worth listing, as the reference
DESCRIPTION = (
    "Search for files by glob pattern. Returns matching file paths relative to the search "
    "directory. Respects .gitignore. Output is truncated to "
    f"{DEFAULT_LIMIT} results or {DEFAULT_MAX_BYTES // 1024}KB (whichever is hit first)."
)


class FindParams(ToolParams):
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
            search_path = ws.resolve(params.path or ".", ctx)
            limit = count_arg(params.limit)
            limit = DEFAULT_LIMIT if limit is None else limit
            if not await ws.exists(search_path):
                raise ToolError(_not_a_directory(search_path))
            _check_pattern(params.pattern)
            try:
                results = await _glob(ws.ops, params.pattern, search_path, limit)
            except NotADirectory:
                raise ToolError(_not_a_directory(search_path)) from None
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


async def _glob(ops: FindOperations, pattern: str, search_path: str, limit: int) -> list[str]:
    """The backend's ``glob`` with fd's reading of a pattern, as the reference runs fd.

    ``dir/**`` matches what is below ``dir``, not ``dir`` itself (the backend dialect's ``**``
    also matches nothing). A pattern with a ``/`` is matched against the absolute path in the
    backend's namespace (fd's ``--full-path``), with ``**/`` put in front unless it starts with
    ``/`` or ``**/`` (the reference's rule): ``src/*.py`` finds ``src/a.py`` at any depth.
    """
    if pattern.endswith("/**"):
        pattern = pattern[:-3] + "/*/**"
    cap = limit if limit > 0 else UNLIMITED
    if "/" in pattern and not pattern.startswith(("/", "**/")):
        pattern = f"**/{pattern}"
    base = search_path.rstrip("/")
    if "/" not in pattern or not _may_start_above(pattern, base):
        return await ops.glob(pattern, search_path, ignore=list(IGNORED), limit=cap)
    matcher = compile_glob(pattern, op="find")
    everything = await ops.glob("**", search_path, ignore=list(IGNORED), limit=UNLIMITED)
    return [rel for rel in everything if matcher.match(f"{base}/{rel}".lstrip("/"))][:cap]


def _may_start_above(pattern: str, base: str) -> bool:
    """Whether a full-path match of ``pattern`` could begin in the search path ``base`` itself.

    If not, matching it relative to the search directory (the backend's ``glob``) gives the
    same paths, without listing the whole tree. An anchored pattern always may; ``**/P`` may
    only if ``P``'s first component matches a component of ``base``.
    """
    if pattern.startswith("/"):
        return True
    rest = pattern
    while rest.startswith("**/"):
        rest = rest[3:]
    first = rest.split("/", 1)[0]
    if first in ("", "**") or "{" in first:  # a brace may hide a "/": assume it may
        return True
    try:
        matcher = compile_glob(first, op="find")
    except InvalidArgument:
        return True
    return any(matcher.match(part) for part in base.split("/") if part)


def _not_a_directory(search_path: str) -> str:
    """fd's two lines for a search path that is missing or not a directory."""
    return (
        f"[fd error]: Search path '{search_path}' is not a directory.\n"
        "[fd error]: No valid search paths given."
    )


def _check_pattern(pattern: str) -> None:
    """Raise fd's ``[fd error]: error parsing glob ...`` for a malformed pattern, naming it as fd
    does (with the ``**/`` the reference adds to a pattern with a ``/`` not at its start)."""
    prefixed = "/" in pattern and not pattern.startswith(("/", "**/")) and pattern != "**"
    shown = f"**/{pattern}" if prefixed else pattern
    try:
        compile_glob(shown, op="find")
    except InvalidArgument as exc:
        raise ToolError(f"[fd error]: {exc.reason}") from None


def create_find_tool(
    cwd: str, *, operations: FindOperations | None = None, home: str | None = None
) -> AgentTool[FindParams, Any]:
    """:func:`create_find_tool_definition`, wrapped for the loop."""
    return wrap_tool_definition(create_find_tool_definition(cwd, operations=operations, home=home))
