"""The README's CI-harness example, verbatim: it must keep working as written."""

from __future__ import annotations

from agent_side import AssistantMessage, ToolCall
from agent_side.loop import execute_tool_calls
from agent_side.tools import create_all_tools
from operations import InMemoryOperations


async def test_the_agent_runs_the_tests() -> None:
    ws = InMemoryOperations({"src/app.py": b"print('hi')\n"})
    ws.commands.register("make test", output="1 passed\n")
    message = AssistantMessage(
        content=[
            ToolCall(id="c1", name="read", arguments={"path": "src/app.py"}),
            ToolCall(id="c2", name="bash", arguments={"command": "make test"}),
        ]
    )
    batch = await execute_tool_calls(create_all_tools(ws.root, ws), message)
    assert [m.content[0].text for m in batch.messages] == ["print('hi')\n", "1 passed\n"]
    assert {"read_file", "exec"} <= {record.op for record in ws.log}
