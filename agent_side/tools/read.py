"""The ``read`` tool: a text file by line window, or an image as an attachment."""

from __future__ import annotations

import asyncio
import base64
import math
from typing import Any

from pydantic import Field

from operations import AbortSignal, IsADirectory, OpsError, ReadOperations

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
from ._image import detect_image_mime_type, process_image
from ._paths import resolve_read_path
from ._tooldef import ToolParams, constrained_sampling, image_result, int_arg, text_result
from ._truncate import DEFAULT_MAX_BYTES, DEFAULT_MAX_LINES, format_size, truncate_head
from ._workspace import Workspace

__all__ = ["ReadParams", "create_read_tool", "create_read_tool_definition"]

DESCRIPTION = (
    "Read the contents of a file. Supports text files and images (jpg, png, gif, webp, bmp). "
    "Images are sent as attachments. For text files, output is truncated to "
    f"{DEFAULT_MAX_LINES} lines or {DEFAULT_MAX_BYTES // 1024}KB (whichever is hit first). Use "
    "offset/limit for large files. When you need the full file, continue with offset until "
    "complete."
)
NON_VISION_NOTE = (
    "[Current model does not support images. The image will be omitted from this request.]"
)


class ReadParams(ToolParams):
    path: str = Field(description="Path to the file to read (relative or absolute)")
    offset: JsonNumber | None = Field(
        default=None, description="Line number to start reading from (1-indexed)"
    )
    limit: JsonNumber | None = Field(default=None, description="Maximum number of lines to read")


def create_read_tool_definition(
    cwd: str,
    *,
    operations: ReadOperations | None = None,
    auto_resize_images: bool = True,
    home: str | None = None,
) -> ToolDefinition[ReadParams, Any]:
    """The ``read`` tool over ``operations`` (``read_file``, ``access``), paths against ``cwd``."""
    ws = Workspace(cwd, operations, home)

    async def execute(
        tool_call_id: str,
        params: ReadParams,
        signal: AbortSignal | None,
        on_update: AgentToolUpdateCallback[Any] | None,
        ctx: ToolContext | None,
    ) -> AgentToolResult[Any]:
        # One ``access`` per path: the answer found while choosing the path is the answer
        # (asking again would be a second decision, and a second audit line, for one read).
        checked: dict[str, OpsError | None] = {}

        async def exists(path: str) -> bool:
            try:
                await ws.ops.access(path)
            except OpsError as exc:
                checked[path] = exc
                return False
            checked[path] = None
            return True

        async with abortable(signal):
            path = await resolve_read_path(
                params.path, ws.cwd_for(ctx), home=ws.home, exists=exists
            )
            error = checked.get(path)  # resolve_read_path returns a path it asked about
            if error is not None:
                raise ToolError(describe_error(error, "access", path)) from None
            try:
                data: bytes = await ws.ops.read_file(path)
            except IsADirectory as exc:  # Node opens it, then fails the read itself
                raise ToolError(describe_error(exc, "read", None)) from None
            except OpsError as exc:
                raise ToolError(describe_error(exc, "open", path)) from None
            mime = detect_image_mime_type(data)
            if mime is not None:
                return await _read_image(data, mime, auto_resize_images, ctx)
            return _read_text(data, params)

    return ToolDefinition(
        name="read",
        label="read",
        description=DESCRIPTION,
        parameters=ReadParams,
        execute=execute,
        prompt_snippet="Read file contents",
        prompt_guidelines=["Use read to examine files instead of cat or sed."],
        constrained_sampling=constrained_sampling(),
    )


def create_read_tool(
    cwd: str,
    *,
    operations: ReadOperations | None = None,
    auto_resize_images: bool = True,
    home: str | None = None,
) -> AgentTool[ReadParams, Any]:
    """:func:`create_read_tool_definition`, wrapped for the loop."""
    definition = create_read_tool_definition(
        cwd, operations=operations, auto_resize_images=auto_resize_images, home=home
    )
    return wrap_tool_definition(definition)


def _model_lacks_images(ctx: ToolContext | None) -> bool:
    if ctx is None or ctx.model is None:
        return False
    inputs = ctx.extra.get("model_input")
    return inputs is not None and "image" not in inputs


async def _read_image(
    data: bytes, mime: str, auto_resize: bool, ctx: ToolContext | None
) -> AgentToolResult[Any]:
    processed = await asyncio.to_thread(process_image, data, mime, auto_resize=auto_resize)
    note = [NON_VISION_NOTE] if _model_lacks_images(ctx) else []
    if processed.data is None:
        text = "\n".join([f"Read image file [{mime}]", processed.omitted or "", *note])
        return text_result(text)
    text = "\n".join([f"Read image file [{processed.mime_type}]", *processed.hints, *note])
    encoded = base64.b64encode(processed.data).decode("ascii")
    return image_result(text, encoded, processed.mime_type)


def _number(value: float | None) -> float | None:
    """``offset``/``limit`` with NaN as absent (``int_arg``'s rule), kept fractional."""
    return None if value is None or math.isnan(value) else value


def _read_text(data: bytes, params: ReadParams) -> AgentToolResult[Any]:
    lines = data.decode("utf-8", "replace").split("\n")
    offset, limit = _number(params.offset), _number(params.limit)
    # The window is computed as the reference does, then cut to whole lines as its slicing does.
    start_at = max(0.0, offset - 1) if offset else 0.0
    start = int_arg(start_at) or 0
    if start >= len(lines):
        raise ToolError(
            f"Offset {int_arg(offset) or 0} is beyond end of file ({len(lines)} lines total)"
        )
    if limit is not None:
        end = max(start, int_arg(min(start_at + limit, len(lines))) or 0)
        selected = lines[start:end]
    else:
        end = len(lines)
        selected = lines[start:]
    truncation = truncate_head("\n".join(selected))
    first = start + 1
    if truncation.first_line_exceeds_limit:
        size = format_size(len(lines[start].encode("utf-8", "surrogatepass")))
        return text_result(
            f"[Line {first} is {size}, exceeds {format_size(DEFAULT_MAX_BYTES)} limit. Use bash: "
            f"sed -n '{first}p' {params.path} | head -c {DEFAULT_MAX_BYTES}]",
            {"truncation": truncation.to_json()},
        )
    if truncation.truncated:
        last = first + truncation.output_lines - 1
        limit_note = (
            f" ({format_size(DEFAULT_MAX_BYTES)} limit)"
            if truncation.truncated_by == "bytes"
            else ""
        )
        notice = (
            f"[Showing lines {first}-{last} of {len(lines)}{limit_note}. "
            f"Use offset={last + 1} to continue.]"
        )
        return text_result(
            f"{truncation.content}\n\n{notice}", {"truncation": truncation.to_json()}
        )
    if limit is not None and end < len(lines):
        return text_result(
            f"{truncation.content}\n\n[{len(lines) - end} more lines in file. "
            f"Use offset={end + 1} to continue.]"
        )
    return text_result(truncation.content)
