"""A ``bash`` call the client cancels (``notifications/cancelled``) leaves zero processes, found
by an environment marker in ``/proc``; the progress notifications carry the output as it comes,
and the server keeps serving."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from tests.broker._procscan import MARK_VAR, kill_pids, new_marker, survivors

from ._client import CALL_TIMEOUT_S, mcp_session

GONE_WITHIN_S = 10.0


async def _poll(condition: object, within: float) -> bool:
    deadline = time.monotonic() + within
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            return False
        await anyio.sleep(0.05)
    return True


async def test_progress_carries_output_as_it_comes(tmp_path: Path) -> None:
    messages: list[str] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    async with mcp_session("--root", str(tmp_path)) as session:
        with anyio.fail_after(CALL_TIMEOUT_S):
            result = await session.call_tool(
                "bash",
                {"command": "for i in 1 2 3; do echo line$i; sleep 0.3; done"},
                progress_callback=progress,
            )
    assert not result.is_error
    assert "line1\n" in messages and "line1\nline2\n" in messages, messages
    assert messages[-1] == "line1\nline2\nline3\n"


@pytest.mark.parametrize("shape", ["plain", "setsid", "nohup-background"])
async def test_cancelled_call_leaves_no_process(shape: str, tmp_path: Path) -> None:
    marker = new_marker()
    tail = {
        "plain": "sleep 300",
        "setsid": "setsid sleep 300 & sleep 300",
        "nohup-background": "(nohup sleep 300 >/dev/null 2>&1 &); sleep 300",
    }[shape]
    command = f"export {MARK_VAR}={marker}; echo started; {tail}"
    started = anyio.Event()

    async def progress(value: float, total: float | None, message: str | None) -> None:
        if message and "started" in message:
            started.set()

    try:
        async with mcp_session("--root", str(tmp_path)) as session:
            async with anyio.create_task_group() as group:
                group.start_soon(
                    lambda: session.call_tool(
                        "bash", {"command": command}, progress_callback=progress
                    )
                )
                with anyio.fail_after(CALL_TIMEOUT_S):
                    await started.wait()
                    assert await _poll(lambda: len(survivors(marker)) >= 1, CALL_TIMEOUT_S)
                group.cancel_scope.cancel()
            assert await _poll(lambda: not survivors(marker), GONE_WITHIN_S), survivors(marker)
            with anyio.fail_after(CALL_TIMEOUT_S):
                after = await session.call_tool("bash", {"command": "echo still-serving"})
            assert not after.is_error
            assert after.content[0].text == "still-serving\n"  # type: ignore[union-attr]
    finally:
        kill_pids(survivors(marker))
