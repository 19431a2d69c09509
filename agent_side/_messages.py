"""Messages, tool results and loop events, as they cross the wire.

Every model here serialises to the reference's JSON names (``toolCallId``, ``isError``,
``partialResult``...) while Python code uses snake_case: ``to_wire()`` gives the JSON shape, and
``model_validate`` accepts either spelling. Optional fields that are unset (``None``) are left
out of the wire form, as ``JSON.stringify`` leaves out ``undefined``; values *inside* ``details``
and ``arguments`` are kept as they are, ``null`` included.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Generic, Literal, TypeAlias, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)
from pydantic.alias_generators import to_camel

__all__ = [
    "AgentEvent",
    "AgentToolResult",
    "AssistantContent",
    "AssistantMessage",
    "ImageContent",
    "Message",
    "MessageEndEvent",
    "MessageStartEvent",
    "StopReason",
    "TextContent",
    "ThinkingContent",
    "ToolCall",
    "ToolExecutionEndEvent",
    "ToolExecutionStartEvent",
    "ToolExecutionUpdateEvent",
    "ToolResultContent",
    "ToolResultMessage",
    "Usage",
    "UsageCost",
    "UserMessage",
    "error_tool_result",
    "now_ms",
]

DetailsT = TypeVar("DetailsT")

StopReason: TypeAlias = Literal[
    "pending", "stop", "length", "toolUse", "error", "aborted", "deferred"
]
"""Why the provider stopped: tool calls run for every reason except ``error``/``aborted``."""


def now_ms() -> int:
    """Milliseconds since the epoch, as ``Date.now()`` gives them (message timestamps)."""
    return int(time.time() * 1000)


class WireModel(BaseModel):
    """Base of the wire models: camelCase aliases, snake_case attributes, unset optionals omitted."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True
    )

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if not isinstance(data, dict):
            return data
        for name, info in type(self).model_fields.items():
            if info.default is None and getattr(self, name) is None:
                data.pop(info.alias or name, None)
                data.pop(name, None)
        return data

    def to_wire(self) -> dict[str, Any]:
        """The JSON object the reference would produce (camelCase names, ``None`` optionals omitted)."""
        return self.model_dump(mode="json", by_alias=True)


class TextContent(WireModel):
    """A text block, in an assistant message or a tool result."""

    type: Literal["text"] = "text"
    text: str
    text_signature: str | None = None


class ImageContent(WireModel):
    """A base64 image block (tool results only); ``mime_type`` e.g. ``"image/png"``."""

    type: Literal["image"] = "image"
    data: str
    mime_type: str


class ThinkingContent(WireModel):
    """A reasoning block of an assistant message; the loop ignores it."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    thinking_signature: str | None = None


class ToolCall(WireModel):
    """One request by the model to run a tool. ``arguments`` is untrusted, raw JSON."""

    type: Literal["toolCall"] = "toolCall"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    thought_signature: str | None = None
    namespace: str | None = None


ToolResultContent: TypeAlias = TextContent | ImageContent
"""What a tool result may contain: text and images, for the model."""

AssistantContent: TypeAlias = TextContent | ThinkingContent | ToolCall
"""What an assistant message may contain."""


class UsageCost(WireModel):
    """Cost of a request in dollars, split as the provider reports it."""

    input: float = 0
    output: float = 0
    cache_read: float = 0
    cache_write: float = 0
    total: float = 0


class Usage(WireModel):
    """Token usage (of a provider call, or of a nested model call inside a tool)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total_tokens: int = 0
    cost: UsageCost = Field(default_factory=UsageCost)


class UserMessage(WireModel):
    """A user prompt."""

    role: Literal["user"] = "user"
    content: str | list[ToolResultContent]
    timestamp: int = Field(default_factory=now_ms)


class AssistantMessage(WireModel):
    """A model response: text, thinking and tool calls in source order, and why it stopped."""

    role: Literal["assistant"] = "assistant"
    content: list[AssistantContent]
    stop_reason: StopReason = "toolUse"
    api: str | None = None
    provider: str | None = None
    model: str | None = None
    usage: Usage | None = None
    error_message: str | None = None
    timestamp: int = Field(default_factory=now_ms)

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The ``toolCall`` blocks, in source order."""
        return [block for block in self.content if isinstance(block, ToolCall)]


def _none_as_empty(value: Any) -> Any:
    """``content: None`` (an untyped tool's result) is no content, as the reference's ``?? []``."""
    return [] if value is None else value


class AgentToolResult(WireModel, Generic[DetailsT]):
    """What a tool returns (and what ``on_update`` receives as a partial result).

    ``content`` is for the model; ``details`` is structured data for the application (rendering,
    logs, state). ``terminate=True`` votes to end the run after this batch: the batch ends the run
    only if every result votes so. ``added_tool_names`` marks tools that became available here.
    """

    content: Annotated[list[ToolResultContent], BeforeValidator(_none_as_empty)]
    details: DetailsT
    usage: Usage | None = None
    added_tool_names: list[str] | None = None
    terminate: bool | None = None


def error_tool_result(message: str) -> AgentToolResult[Any]:
    """The result the loop makes from a failure: one text block, empty details (``createErrorToolResult``)."""
    return AgentToolResult[Any](content=[TextContent(text=message)], details={})


class ToolResultMessage(WireModel, Generic[DetailsT]):
    """The transcript entry for one finished tool call; ``terminate`` is deliberately absent."""

    role: Literal["toolResult"] = "toolResult"
    tool_call_id: str
    tool_name: str
    content: list[ToolResultContent]
    details: DetailsT | None = None
    usage: Usage | None = None
    added_tool_names: list[str] | None = None
    is_error: bool
    timestamp: int = Field(default_factory=now_ms)


Message: TypeAlias = UserMessage | AssistantMessage | ToolResultMessage[Any]
"""Any transcript message."""


class ToolExecutionStartEvent(WireModel):
    """A tool call begins; ``args`` are the raw arguments from the model."""

    type: Literal["tool_execution_start"] = "tool_execution_start"
    tool_call_id: str
    tool_name: str
    args: dict[str, Any]


class ToolExecutionUpdateEvent(WireModel):
    """Progress from a running tool (only while ``execute`` has not settled)."""

    type: Literal["tool_execution_update"] = "tool_execution_update"
    tool_call_id: str
    tool_name: str
    args: dict[str, Any]
    partial_result: AgentToolResult[Any]


class ToolExecutionEndEvent(WireModel):
    """A tool call is final: its (patched) result and whether it is an error."""

    type: Literal["tool_execution_end"] = "tool_execution_end"
    tool_call_id: str
    tool_name: str
    result: AgentToolResult[Any]
    is_error: bool


class MessageStartEvent(WireModel):
    """A message enters the transcript (a tool result's start is followed at once by its end)."""

    type: Literal["message_start"] = "message_start"
    message: Message


class MessageEndEvent(WireModel):
    """A message is complete."""

    type: Literal["message_end"] = "message_end"
    message: Message


AgentEvent: TypeAlias = (
    ToolExecutionStartEvent
    | ToolExecutionUpdateEvent
    | ToolExecutionEndEvent
    | MessageStartEvent
    | MessageEndEvent
)
"""The events ``execute_tool_calls`` emits."""
