"""Wire names: camelCase JSON as the reference, snake_case in Python, unset optionals omitted."""

from __future__ import annotations

from typing import Any

from agent_side import (
    AgentToolResult,
    AssistantMessage,
    ImageContent,
    MessageEndEvent,
    TextContent,
    ToolCall,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
    ToolExecutionUpdateEvent,
    ToolResultMessage,
    Usage,
    error_tool_result,
)


def test_tool_call_and_assistant_message_round_trip() -> None:
    wire = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "hi"},
            {
                "type": "toolCall",
                "id": "call_abc123",
                "name": "read",
                "arguments": {"path": "src/main.ts"},
                "thoughtSignature": "sig",
            },
        ],
        "stopReason": "toolUse",
        "usage": {
            "input": 1,
            "output": 2,
            "cacheRead": 0,
            "cacheWrite": 0,
            "totalTokens": 3,
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
        },
        "timestamp": 1787533200000,
    }
    message = AssistantMessage.model_validate(wire)
    assert message.stop_reason == "toolUse"
    assert message.tool_calls == [
        ToolCall(
            id="call_abc123",
            name="read",
            arguments={"path": "src/main.ts"},
            thought_signature="sig",
        )
    ]
    assert message.to_wire() == wire


def test_result_message_shape_matches_the_reference_example() -> None:
    message = ToolResultMessage[Any](
        tool_call_id="call_abc123",
        tool_name="read",
        content=[TextContent(text="export const answer = 42;")],
        details={"path": "src/main.ts", "exitCode": None},
        is_error=False,
        timestamp=1787533200000,
    )
    assert message.to_wire() == {
        "role": "toolResult",
        "toolCallId": "call_abc123",
        "toolName": "read",
        "content": [{"type": "text", "text": "export const answer = 42;"}],
        "details": {"path": "src/main.ts", "exitCode": None},  # nulls inside details are kept
        "isError": False,
        "timestamp": 1787533200000,
    }


def test_event_wire_names() -> None:
    result = AgentToolResult[Any](
        content=[ImageContent(data="AAAA", mime_type="image/png")],
        details=None,
        usage=Usage(total_tokens=5),
        added_tool_names=["x"],
        terminate=True,
    )
    start = ToolExecutionStartEvent(tool_call_id="1", tool_name="read", args={"path": "a"})
    update = ToolExecutionUpdateEvent(
        tool_call_id="1", tool_name="read", args={}, partial_result=result
    )
    end = ToolExecutionEndEvent(tool_call_id="1", tool_name="read", result=result, is_error=False)
    assert start.to_wire() == {
        "type": "tool_execution_start",
        "toolCallId": "1",
        "toolName": "read",
        "args": {"path": "a"},
    }
    assert set(update.to_wire()) == {"type", "toolCallId", "toolName", "args", "partialResult"}
    end_wire = end.to_wire()
    assert end_wire["isError"] is False
    assert end_wire["result"]["content"] == [
        {"type": "image", "data": "AAAA", "mimeType": "image/png"}
    ]
    assert end_wire["result"]["addedToolNames"] == ["x"] and end_wire["result"]["terminate"] is True
    assert end_wire["result"]["details"] is None  # details is required, so null is explicit
    message = ToolResultMessage[Any](tool_call_id="1", tool_name="read", content=[], is_error=True)
    assert MessageEndEvent(message=message).to_wire()["message"]["role"] == "toolResult"


def test_error_tool_result_is_text_and_empty_details() -> None:
    assert error_tool_result("boom").to_wire() == {
        "content": [{"type": "text", "text": "boom"}],
        "details": {},
    }
