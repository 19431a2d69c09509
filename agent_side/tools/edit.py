"""The ``edit`` tool: exact (then whitespace- and typography-tolerant) text replacement."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ConfigDict, Field

from operations import AbortSignal, EditOperations, IsADirectory, OpsError

from .._messages import AgentToolResult
from .._tool import (
    AgentTool,
    AgentToolUpdateCallback,
    ToolContext,
    ToolDefinition,
    wrap_tool_definition,
)
from ._edit_diff import (
    Edit,
    EditError,
    apply_edits,
    detect_line_ending,
    generate_diff_string,
    generate_unified_patch,
    normalize_to_lf,
    restore_line_endings,
    strip_bom,
)
from ._errors import ToolError, check_aborted, describe_error, describe_reason, errno_name
from ._queue import in_mutation_queue
from ._tooldef import ToolParams, constrained_sampling, text_result
from ._workspace import Workspace

__all__ = [
    "EditItem",
    "EditParams",
    "create_edit_tool",
    "create_edit_tool_definition",
    "prepare_edit_arguments",
]

DESCRIPTION = (
    "Edit a single file using exact text replacement. Every edits[].oldText must match a unique, "
    "non-overlapping region of the original file. If two changes affect the same block or nearby "
    "lines, merge them into one edit instead of emitting overlapping edits. Do not include large "
    "unchanged regions just to connect distant changes."
)
GUIDELINES = [
    "Use edit for precise changes (edits[].oldText must match exactly)",
    "When changing multiple separate locations in one file, use one edit call with multiple "
    "entries in edits[] instead of multiple edit calls",
    "Each edits[].oldText is matched against the original file, not after earlier edits are "
    "applied. Do not emit overlapping or nested edits. Merge nearby changes into one edit.",
    "Keep edits[].oldText as small as possible while still being unique in the file. Do not pad "
    "with large unchanged regions.",
]


class EditItem(ToolParams):
    model_config = ConfigDict(populate_by_name=True)

    old_text: str = Field(
        alias="oldText",
        description="Exact text for one targeted replacement. It must be unique in the original "
        "file and must not overlap with any other edits[].oldText in the same call.",
    )
    new_text: str = Field(alias="newText", description="Replacement text for this targeted edit.")


class EditParams(ToolParams):
    path: str = Field(description="Path to the file to edit (relative or absolute)")
    edits: list[EditItem] = Field(
        description="One or more targeted replacements. Each edit is matched against the "
        "original file, not incrementally. Do not include overlapping or nested edits. If two "
        "changes touch the same block or nearby lines, merge them into one edit instead."
    )


def _is_pair(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("oldText"), str)
        and isinstance(value.get("newText"), str)
    )


def prepare_edit_arguments(args: Any) -> Any:
    """Fold the legacy argument shapes into ``edits`` before validation.

    A JSON-string ``edits`` is parsed, a single edit object is wrapped in a list, and top-level
    ``oldText``/``newText`` are appended to ``edits``; each change makes a new object (the input is
    never mutated). Anything else, and valid input, is returned as the same object.
    """
    if not isinstance(args, dict):
        return args
    edits = args.get("edits")
    if isinstance(edits, str):
        try:
            parsed = json.loads(edits)
        except ValueError:
            parsed = None
        if isinstance(parsed, list):
            args = {**args, "edits": parsed}
        elif _is_pair(parsed):
            args = {**args, "edits": [parsed]}
    elif _is_pair(edits):
        args = {**args, "edits": [edits]}
    if isinstance(args.get("oldText"), str) and isinstance(args.get("newText"), str):
        folded = {k: v for k, v in args.items() if k not in ("oldText", "newText")}
        existing = args.get("edits")
        folded["edits"] = [
            *(existing if isinstance(existing, list) else []),
            {"oldText": args["oldText"], "newText": args["newText"]},
        ]
        return folded
    return args


def create_edit_tool_definition(
    cwd: str, *, operations: EditOperations | None = None, home: str | None = None
) -> ToolDefinition[EditParams, Any]:
    """The ``edit`` tool over ``operations`` (``access``, ``read_file``, ``write_file``).

    Every edit is matched against the original file; the file is written once, only if all of
    them apply, with its BOM and first-line line ending restored. The result's details carry a
    numbered ``diff``, a unified ``patch`` and ``firstChangedLine``.
    """
    ws = Workspace(cwd, operations, home)

    async def execute(
        tool_call_id: str,
        params: EditParams,
        signal: AbortSignal | None,
        on_update: AgentToolUpdateCallback[Any] | None,
        ctx: ToolContext | None,
    ) -> AgentToolResult[Any]:
        if not params.edits:
            raise ToolError(
                "Edit tool input is invalid. edits must contain at least one replacement."
            )
        path = ws.resolve(params.path, ctx)

        async def edit() -> AgentToolResult[Any]:
            check_aborted(signal)
            try:
                await ws.ops.access(path, writable=True)
            except Exception as exc:
                check_aborted(signal)
                raise ToolError(f"Could not edit file: {params.path}. {_detail(exc)}.") from None
            try:
                data: bytes = await ws.ops.read_file(path)
            except IsADirectory as exc:
                raise ToolError(describe_error(exc, "read", None)) from None
            except OpsError as exc:
                raise ToolError(describe_error(exc, "open", path)) from None
            check_aborted(signal)
            bom, text = strip_bom(data.decode("utf-8", "replace"))
            ending = detect_line_ending(text)
            edits = [Edit(e.old_text, e.new_text) for e in params.edits]
            original = normalize_to_lf(text)
            try:
                new = apply_edits(original, edits, params.path)
            except EditError as exc:
                raise ToolError(str(exc)) from None
            check_aborted(signal)
            try:
                await ws.ops.write_file(path, bom + restore_line_endings(new, ending))
            except OpsError as exc:
                raise ToolError(describe_error(exc, "open", path)) from None
            check_aborted(signal)
            diff, first_changed = generate_diff_string(original, new)
            details: dict[str, Any] = {
                "diff": diff,
                "patch": generate_unified_patch(params.path, original, new),
            }
            if first_changed is not None:
                details["firstChangedLine"] = first_changed
            return text_result(
                f"Successfully replaced {len(edits)} block(s) in {params.path}.", details
            )

        return await in_mutation_queue(ws, path, edit)

    return ToolDefinition(
        name="edit",
        label="edit",
        description=DESCRIPTION,
        parameters=EditParams,
        execute=execute,
        prompt_snippet="Make precise file edits with exact text replacement, including multiple "
        "disjoint edits in one call",
        prompt_guidelines=GUIDELINES,
        constrained_sampling=constrained_sampling(),
        render_shell="self",
        prepare_arguments=prepare_edit_arguments,
    )


def create_edit_tool(
    cwd: str, *, operations: EditOperations | None = None, home: str | None = None
) -> AgentTool[EditParams, Any]:
    """:func:`create_edit_tool_definition`, wrapped for the loop."""
    return wrap_tool_definition(create_edit_tool_definition(cwd, operations=operations, home=home))


def _detail(error: BaseException) -> str:
    """``Error code: ENOENT`` when the error has a POSIX code, else the error itself."""
    if isinstance(error, OpsError):
        code = errno_name(error)
        if code is not None:
            return f"Error code: {code}"
        return f"Error code: {error.code.upper()} ({describe_reason(error)})"
    return f"Error: {error}"
