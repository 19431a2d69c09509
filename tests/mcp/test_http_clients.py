"""Over Streamable HTTP: two clients at once only ever see their own results, and a ``bash`` call
the client cancels leaves zero processes (found by an environment marker in ``/proc``)."""

from __future__ import annotations

from pathlib import Path

import anyio
import mcp_types as types
import pytest

from tests.broker._procscan import MARK_VAR, kill_pids, new_marker, survivors

from ._client import CALL_TIMEOUT_S
from ._http import ALICE, BOB, KINDS, http_server, http_session
from .test_cancel import GONE_WITHIN_S, _poll

ROUNDS = 15


async def test_concurrent_clients_see_only_their_own(tmp_path: Path) -> None:
    seen: dict[str, list[str]] = {ALICE: [], BOB: []}

    async def client(url: str, token: str, name: str) -> None:
        async with http_session(url, token) as session:
            for i in range(ROUNDS):
                with anyio.fail_after(CALL_TIMEOUT_S):
                    result = await session.call_tool(
                        "bash", {"command": f"sleep 0.0$RANDOM; echo {name}-{i}"}
                    )
                seen[token].append(result.content[0].text)  # type: ignore[union-attr]

    with http_server(tmp_path, "--root", str(tmp_path)) as url:
        async with anyio.create_task_group() as group:
            group.start_soon(client, url, ALICE, "alice")
            group.start_soon(client, url, BOB, "bob")
    assert seen[ALICE] == [f"alice-{i}\n" for i in range(ROUNDS)]
    assert seen[BOB] == [f"bob-{i}\n" for i in range(ROUNDS)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", ["plain", "setsid"])
async def test_cancelled_call_leaves_no_process(shape: str, kind: str, tmp_path: Path) -> None:
    marker = new_marker()
    tail = {"plain": "sleep 300", "setsid": "setsid sleep 300 & sleep 300"}[shape]
    command = f"export {MARK_VAR}={marker}; echo started; {tail}"
    started = anyio.Event()

    async def progress(value: float, total: float | None, message: str | None) -> None:
        if message and "started" in message:
            started.set()

    try:
        with http_server(tmp_path, "--root", str(tmp_path), kind=kind) as url:
            async with http_session(url) as session:
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
                assert after.content[0].text == "still-serving\n"  # type: ignore[union-attr]
    finally:
        kill_pids(survivors(marker))


async def test_another_principal_cannot_cancel(tmp_path: Path) -> None:
    marker = new_marker()
    command = f"export {MARK_VAR}={marker}; echo started; sleep 2; echo finished"
    try:
        with http_server(tmp_path, "--root", str(tmp_path)) as url:
            async with http_session(url, ALICE) as alice, http_session(url, BOB) as bob:
                results: list[str] = []

                async def run() -> None:
                    result = await alice.call_tool("bash", {"command": command})
                    results.append(result.content[0].text)  # type: ignore[union-attr]

                async with anyio.create_task_group() as group:
                    group.start_soon(run)
                    with anyio.fail_after(CALL_TIMEOUT_S):
                        assert await _poll(lambda: len(survivors(marker)) >= 1, CALL_TIMEOUT_S)
                    for request_id in range(10):  # whatever id alice's call has, bob names it
                        await bob.send_notification(_cancelled(request_id))
        assert results == ["started\nfinished\n"]
    finally:
        kill_pids(survivors(marker))


def _cancelled(request_id: int) -> types.CancelledNotification:
    return types.CancelledNotification(
        params=types.CancelledNotificationParams(request_id=request_id, reason="not yours")
    )
