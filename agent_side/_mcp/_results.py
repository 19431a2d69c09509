"""The tool runtime's tools and results as MCP's: a translation, nothing decided here.

A tool's name, description and JSON Schema are the runtime's own (``tool.parameters_schema``,
what a model provider is shown); a result's content blocks are the result message's, text as
text and images as base64 images, in order; ``isError`` is the message's. The annotations say
what each tool may do to the workspace.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

from .._messages import ImageContent, ToolResultMessage
from .._tool import AgentTool

__all__ = ["READ_ONLY_TOOLS", "call_tool_result", "mcp_tool"]

READ_ONLY_TOOLS = frozenset({"read", "ls", "find", "grep"})
"""The tools that never change the workspace (``readOnlyHint``); the others may destroy data."""


def _annotations(name: str) -> types.ToolAnnotations:
    if name in READ_ONLY_TOOLS:
        return types.ToolAnnotations(read_only_hint=True, open_world_hint=False)
    return types.ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)


def mcp_tool(tool: AgentTool[Any, Any]) -> types.Tool:
    """``tool`` as ``tools/list`` shows it: its name, description, schema and annotations."""
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=tool.parameters_schema,
        annotations=_annotations(tool.name),
    )


def call_tool_result(message: ToolResultMessage[Any]) -> types.CallToolResult:
    """The result message as ``tools/call`` returns it: the same blocks, the same error flag."""
    content: list[types.ContentBlock] = []
    for block in message.content:
        if isinstance(block, ImageContent):
            content.append(types.ImageContent(data=block.data, mime_type=block.mime_type))
        else:
            content.append(types.TextContent(text=block.text))
    return types.CallToolResult(content=content, is_error=message.is_error)
