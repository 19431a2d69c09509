"""A session recorded against ``local:`` replays on the memory backend with the same results.

The session runs the eight built-in tools and a few commands through the tool-execution loop
(:func:`agent_side.loop.execute_tool_calls`); the replay runs the same assistant messages over
``InMemoryOperations.from_cassette`` and must give byte-identical tool results in the same event
order. An edit that changes a command's input makes that command a mismatch on replay.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_side import AssistantMessage, ToolCall, connect
from agent_side.loop import execute_tool_calls
from agent_side.tools import create_all_tools
from operations import Backend, CassetteMismatch, InMemoryOperations, ReplayOperations
from tests.conformance._commands import SHORT_LIMIT_S


def _message(*calls: tuple[str, dict[str, Any]]) -> AssistantMessage:
    return AssistantMessage(
        content=[
            ToolCall(id=str(i), name=name, arguments=args) for i, (name, args) in enumerate(calls)
        ]
    )


SESSION = [
    _message(
        ("ls", {}),
        ("find", {"pattern": "*.py"}),
        ("grep", {"pattern": "def ", "path": "."}),
        ("read", {"path": "src/app.py"}),
    ),
    _message(("bash", {"command": "cat src/app.py | wc -l"})),
    _message(("bash", {"command": "printf 'one\\n'; sleep 0.05; printf 'two\\n'; exit 3"})),
    _message(
        ("edit", {"path": "src/app.py", "oldText": "return 1", "newText": "return 2"}),
        ("write", {"path": "notes/todo.md", "content": "# todo\n"}),
    ),
    _message(("bash", {"command": "python3 src/app.py > out.txt && cat out.txt"})),
    _message(("read", {"path": "out.txt"}), ("ls", {"path": "notes"})),
    _message(("powershell", {"command": "Get-ChildItem"})),
    _message(("bash", {"command": "ls /nonexistent-dir-for-cassette-test"})),
]


def _workspace(root: Path) -> None:
    (root / "src").mkdir(parents=True)
    (root / "src/app.py").write_text("def main():\n    return 1\n\nprint(main())\n")
    (root / "README.md").write_text("# demo\n")


async def _run(ops: Backend, messages: list[AssistantMessage]) -> list[Any]:
    """Every event of every batch, without timestamps (the only field that may differ)."""
    events: list[Any] = []

    def emit(event: Any) -> None:
        events.append(_strip(event.model_dump()))

    tools = create_all_tools(ops.root, ops)
    for message in messages:
        await execute_tool_calls(tools, message, emit=emit, tool_execution="sequential")
    return events


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "timestamp"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


async def _record(tmp_path: Path, messages: list[AssistantMessage]) -> tuple[Path, list[Any]]:
    root = tmp_path / "ws"
    _workspace(root)
    cassette = tmp_path / "session.cassette"
    async with connect(f"local:{root}", record=cassette) as ops:
        events = await _run(ops, messages)
    return cassette, events


async def test_replay_gives_the_recorded_results_in_the_recorded_order(tmp_path: Path) -> None:
    cassette, recorded = await _record(tmp_path, SESSION)
    async with InMemoryOperations.from_cassette(cassette, root=str(tmp_path / "ws")) as replay:
        replayed = await _run(replay, SESSION)
        assert isinstance(replay, ReplayOperations)
        assert replay.mismatches == []
        # The command's own change (out.txt) reached the replayed tree.
        assert replay.snapshot()["out.txt"] == b"2\n"
    assert [e["type"] for e in replayed] == [e["type"] for e in recorded]
    assert replayed == recorded
    texts = [e for e in recorded if e["type"] == "tool_execution_end"]
    assert "Command exited with code 3" in texts[5]["result"]["content"][0]["text"]


async def test_replay_at_another_root_is_the_same_session_elsewhere(tmp_path: Path) -> None:
    cassette, _ = await _record(tmp_path, SESSION[:1])
    async with InMemoryOperations.from_cassette(cassette) as replay:
        assert replay.root == str(tmp_path / "ws")  # the recorded root by default
        assert replay.snapshot()["src/app.py"].startswith(b"def main()")


async def test_a_changed_input_is_a_mismatch_not_a_stale_answer(tmp_path: Path) -> None:
    cassette, _ = await _record(tmp_path, SESSION)
    changed = list(SESSION)
    changed[3] = _message(
        ("edit", {"path": "src/app.py", "oldText": "return 1", "newText": "return 5"}),
        ("write", {"path": "notes/todo.md", "content": "# todo\n"}),
    )
    async with InMemoryOperations.from_cassette(cassette, root=str(tmp_path / "ws")) as replay:
        events = await _run(replay, changed)
        assert isinstance(replay, ReplayOperations)
        assert isinstance(replay, ReplayOperations)
        # The command after the edit, and the two after it (the digest stays changed).
        assert len(replay.mismatches) == 3
    message = str(replay.mismatches[0])
    assert "python3 src/app.py > out.txt && cat out.txt" in message
    assert "recorded with other inputs" in message
    ends = [e for e in events if e["type"] == "tool_execution_end"]
    assert ends[8]["isError"]
    assert "recorded with other inputs" in ends[8]["result"]["content"][0]["text"]


async def test_an_unrecorded_command_names_the_nearest_recorded_ones(tmp_path: Path) -> None:
    cassette, _ = await _record(tmp_path, SESSION[:2])
    replay = InMemoryOperations.from_cassette(cassette, mode="once")
    chunks: list[bytes] = []
    with pytest.raises(CassetteMismatch) as caught:
        await replay.exec("cat src/app.py | wc -w", replay.root, on_data=chunks.append)
    assert "nearest recorded: 'cat src/app.py | wc -l'" in str(caught.value)
    assert str(cassette) in str(caught.value)
    await replay.aclose()


async def test_strict_mode_wants_the_recorded_order(tmp_path: Path) -> None:
    cassette, _ = await _record(tmp_path, [_message(("bash", {"command": "echo a"})),
                                           _message(("bash", {"command": "echo b"}))])  # fmt: skip
    out: list[bytes] = []
    async with InMemoryOperations.from_cassette(cassette, mode="strict") as strict:
        with pytest.raises(CassetteMismatch, match="the next recorded command is 'echo a'"):
            await strict.exec("echo b", strict.root, on_data=out.append)
    async with InMemoryOperations.from_cassette(cassette, mode="once") as once:
        assert (await once.exec("echo b", once.root, on_data=out.append)).exit_code == 0
        assert (await once.exec("echo a", once.root, on_data=out.append)).exit_code == 0
        with pytest.raises(CassetteMismatch, match="every recorded run of it has been replayed"):
            await once.exec("echo a", once.root, on_data=out.append)
    assert out == [b"b\n", b"a\n"]


async def test_new_episodes_runs_a_new_command_live_and_appends_it(tmp_path: Path) -> None:
    cassette, _ = await _record(tmp_path, [_message(("bash", {"command": "echo a"}))])
    live = connect(f"local:{tmp_path / 'ws'}")
    out: list[bytes] = []
    async with InMemoryOperations.from_cassette(cassette, mode="new_episodes", live=live) as ops:
        assert (await ops.exec("echo a", ops.root, on_data=out.append)).exit_code == 0
        assert (await ops.exec("echo new > n.txt", ops.root, on_data=out.append)).exit_code == 0
        assert ops.snapshot()["n.txt"] == b"new\n"  # the live command's change, replayed
    async with InMemoryOperations.from_cassette(cassette, mode="once") as again:
        assert (await again.exec("echo new > n.txt", again.root, on_data=out.append)).exit_code == 0
        assert again.snapshot()["n.txt"] == b"new\n"
    assert out == [b"a\n"]


async def test_a_timeout_replays_as_a_timeout(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    cassette = tmp_path / "t.cassette"
    async with connect(f"local:{root}", record=cassette) as ops:
        result = await ops.exec(
            "echo start; sleep 5", str(root), on_data=list().append, timeout=SHORT_LIMIT_S
        )
    assert result.kill_reason is not None
    out: list[bytes] = []
    async with InMemoryOperations.from_cassette(cassette, time_scale=0.01) as replay:
        again = await replay.exec(
            "echo start; sleep 5", str(root), on_data=out.append, timeout=SHORT_LIMIT_S
        )
    assert again == result
    assert out == [b"start\n"]
