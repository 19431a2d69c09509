"""The built-in tools through the tool-execution loop: validation, legacy arguments, errors."""

from __future__ import annotations

from agent_side import AssistantMessage, ToolCall
from agent_side.loop import execute_tool_calls
from agent_side.tools import create_coding_tools
from tests.tools.conftest import ToolWorkspace


async def test_one_assistant_message(tw: ToolWorkspace) -> None:
    tw.write("notes.txt", "alpha\nbeta\n")
    tw.script("exit 4", exit_code=4)
    message = AssistantMessage(
        content=[
            ToolCall(id="1", name="read", arguments={"path": "notes.txt", "limit": "1"}),
            ToolCall(
                id="2",
                name="edit",
                arguments={"path": "notes.txt", "oldText": "beta", "newText": "BETA"},
            ),
            ToolCall(id="3", name="bash", arguments={"command": "exit 4"}),
            ToolCall(id="4", name="read", arguments={"offset": 2}),
        ]
    )
    batch = await execute_tool_calls(
        create_coding_tools(tw.root, tw.ops), message, tool_execution="sequential"
    )
    texts = [(m.tool_call_id, m.is_error, m.content[0].text) for m in batch.messages]
    assert texts[:3] == [
        ("1", False, "alpha\n\n[2 more lines in file. Use offset=2 to continue.]"),
        ("2", False, "Successfully replaced 1 block(s) in notes.txt."),
        ("3", True, "(no output)\n\nCommand exited with code 4"),
    ]
    assert texts[3][1] and texts[3][2].startswith('Validation failed for tool "read":')
    assert tw.read("notes.txt") == b"alpha\nBETA\n"
