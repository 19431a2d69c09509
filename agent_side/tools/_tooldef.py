"""What every built-in tool shares: its result shape and the experimental strict-schema switch."""

from __future__ import annotations

import os
from typing import Any

from .._messages import AgentToolResult, ImageContent, TextContent
from .._tool import ConstrainedSampling

__all__ = ["constrained_sampling", "int_arg", "text_result"]


def text_result(text: str, details: dict[str, Any] | None = None) -> AgentToolResult[Any]:
    """A result with one text block; ``details`` stays ``None`` when there is nothing to add."""
    return AgentToolResult[Any](content=[TextContent(text=text)], details=details or None)


def image_result(text: str, data: str, mime_type: str) -> AgentToolResult[Any]:
    return AgentToolResult[Any](
        content=[TextContent(text=text), ImageContent(data=data, mime_type=mime_type)],
        details=None,
    )


def constrained_sampling() -> ConstrainedSampling | None:
    """``json_schema``/``prefer`` when ``PI_EXPERIMENTAL=1`` at creation time, as the reference."""
    if os.environ.get("PI_EXPERIMENTAL") == "1":
        return ConstrainedSampling(type="json_schema", strict="prefer")
    return None


def int_arg(value: float | None) -> int | None:
    """A JSON number argument as a whole number, truncated toward zero (as JS array slicing does)."""
    return None if value is None else int(value)
