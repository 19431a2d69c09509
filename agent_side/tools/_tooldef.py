"""What every built-in tool shares: its result shape and the experimental strict-schema switch."""

from __future__ import annotations

import math
import os
import sys
from typing import Any

from pydantic import BaseModel, ConfigDict

from .._messages import AgentToolResult, ImageContent, TextContent
from .._tool import ConstrainedSampling

__all__ = [
    "ToolParams",
    "constrained_sampling",
    "count_arg",
    "image_result",
    "int_arg",
    "text_result",
]


def _unpublished_extras(schema: dict[str, Any]) -> None:
    schema.pop("additionalProperties", None)


class ToolParams(BaseModel):
    """Base of the built-in tools' parameters: properties the schema does not name are kept.

    The reference's validation passes them through (``{"path": "a", "extra": 1}`` reaches
    ``before_tool_call`` and ``execute`` as given), so ``model_extra`` holds them and
    ``model_dump`` includes them. The published schema stays TypeBox's (no
    ``additionalProperties`` key, which means the same).
    """

    model_config = ConfigDict(extra="allow", json_schema_extra=_unpublished_extras)


def text_result(text: str, details: dict[str, Any] | None = None) -> AgentToolResult[Any]:
    """A result with one text block; ``details`` stays ``None`` when there is nothing to add."""
    return AgentToolResult[Any](content=[TextContent(text=text)], details=details or None)


def image_result(text: str, data: str, mime_type: str) -> AgentToolResult[Any]:
    """A text block followed by a base64 image block (``read`` of an image)."""
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
    """A line-number argument as a whole number, truncated toward zero (as JS array slicing does).

    NaN counts as absent and an infinity as the largest whole number, so no value that reaches a
    tool (``before_tool_call`` may set one without revalidation) can fail the conversion.
    """
    if value is None or math.isnan(value):
        return None
    if math.isinf(value):
        return sys.maxsize if value > 0 else -sys.maxsize
    return int(value)


def count_arg(value: float | None) -> int | None:
    """A ``limit`` argument as a whole number of items, rounded up: the reference stops listing
    once ``count >= limit``, so ``2.5`` shows 3 entries; :func:`int_arg`'s rules otherwise."""
    whole = int_arg(value)
    if whole is None or value is None or math.isinf(value):
        return whole
    return math.ceil(value)
