"""More calls at once than a gRPC connection carried before (256 streams): every one runs, and one
more still answers, on every backend, as on the SSH connection (one channel per call)."""

from __future__ import annotations

import asyncio

from operations import AbortController, ExecResult, KillReason
from tests.conformance import _commands as cmd
from tests.conformance._workspace import Workspace

MANY = 300
WAIT_S = 60.0  # every wait here is bounded; generous, the machine is shared


async def test_a_call_beside_many_running_ones_answers(ws: Workspace) -> None:
    controllers = [AbortController() for _ in range(MANY)]
    started = 0
    all_started = asyncio.Event()

    def on_data(data: bytes) -> None:
        nonlocal started
        if b"start" in data:
            started += 1
            if started == MANY:
                all_started.set()

    running = [
        asyncio.create_task(
            ws.ops.exec(cmd.START_THEN_SLEEP, ws.root, on_data=on_data, signal=c.signal)
        )
        for c in controllers
    ]
    try:
        try:
            await asyncio.wait_for(all_started.wait(), WAIT_S)
        except TimeoutError:
            raise AssertionError(f"{started} of {MANY} commands started") from None
        out: list[bytes] = []
        result = await asyncio.wait_for(
            ws.ops.exec(cmd.ECHO_HI, ws.root, on_data=out.append), WAIT_S
        )
        assert (result, b"".join(out)) == (ExecResult(0), b"hi\n")
    finally:
        for c in controllers:
            c.abort()
        ended = await asyncio.wait_for(asyncio.gather(*running, return_exceptions=True), WAIT_S)
    assert ended == [ExecResult(None, KillReason.ABORTED)] * MANY
