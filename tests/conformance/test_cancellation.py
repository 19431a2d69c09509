"""Timeouts, aborts by signal and by task cancellation: the command is gone before exec returns."""

from __future__ import annotations

import asyncio
import time

import pytest

from operations import AbortController, AbortSignal, ExecResult, KillReason
from tests.conformance import _commands as cmd
from tests.conformance._workspace import Workspace

QUICK = 5.0
"""Upper bound (s) for a kill to take effect: far below the command's 30 s, generous for CI."""


async def test_timeout_kills_and_keeps_partial_output(ws: Workspace) -> None:
    chunks: list[bytes] = []
    started = time.monotonic()
    result = await ws.ops.exec(
        cmd.START_THEN_SLEEP, ws.root, on_data=chunks.append, timeout=cmd.SHORT_LIMIT_S
    )
    elapsed = time.monotonic() - started
    assert result == ExecResult(None, KillReason.TIMEOUT)
    assert result.killed
    assert b"".join(chunks) == b"start\n"
    assert cmd.SHORT_LIMIT_S - 0.05 <= elapsed < cmd.SHORT_LIMIT_S + QUICK


async def test_timeout_not_reached(ws: Workspace) -> None:
    result = await ws.ops.exec(cmd.ECHO_HI, ws.root, on_data=lambda _: None, timeout=10)
    assert result == ExecResult(0)


async def test_abort_by_signal(ws: Workspace) -> None:
    controller = AbortController()
    chunks: list[bytes] = []

    def on_data(data: bytes) -> None:
        chunks.append(data)
        if b"start" in data:
            asyncio.get_running_loop().call_later(0.1, controller.abort)

    started = time.monotonic()
    result = await ws.ops.exec(
        cmd.START_THEN_SLEEP, ws.root, on_data=on_data, signal=controller.signal
    )
    assert result == ExecResult(None, KillReason.ABORTED)
    assert b"".join(chunks) == b"start\n"
    assert time.monotonic() - started < QUICK


async def test_already_aborted_signal_runs_nothing(ws: Workspace) -> None:
    chunks: list[bytes] = []
    result = await ws.ops.exec(
        cmd.ECHO_HI, ws.root, on_data=chunks.append, signal=AbortSignal.aborted_signal()
    )
    assert result == ExecResult(None, KillReason.ABORTED)
    assert chunks == []


async def test_abort_after_completion_changes_nothing(ws: Workspace) -> None:
    controller = AbortController()
    result = await ws.ops.exec(
        cmd.ECHO_HI, ws.root, on_data=lambda _: None, signal=controller.signal
    )
    controller.abort()
    assert result == ExecResult(0)
    assert await ws.ops.exec(cmd.ECHO_HI, ws.root, on_data=lambda _: None) == ExecResult(0)


async def test_task_cancellation_kills_and_reraises(ws: Workspace) -> None:
    started_output = asyncio.Event()

    def on_data(data: bytes) -> None:
        started_output.set()

    task = asyncio.create_task(ws.ops.exec(cmd.START_THEN_SLEEP, ws.root, on_data=on_data))
    await asyncio.wait_for(started_output.wait(), QUICK)
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < QUICK
    # The backend is still usable afterwards.
    assert await ws.ops.exec(cmd.ECHO_HI, ws.root, on_data=lambda _: None) == ExecResult(0)


async def test_outer_timeout_cancels_exec(ws: Workspace) -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await ws.ops.exec(cmd.SLEEP, ws.root, on_data=lambda _: None)
    assert time.monotonic() - started < QUICK


async def test_abort_one_of_several(ws: Workspace) -> None:
    controller = AbortController()
    sleeper = asyncio.create_task(
        ws.ops.exec(cmd.SLEEP, ws.root, on_data=lambda _: None, signal=controller.signal)
    )
    quick = await ws.ops.exec(cmd.ECHO_HI, ws.root, on_data=lambda _: None)
    controller.abort()
    assert quick == ExecResult(0)
    assert await asyncio.wait_for(sleeper, QUICK) == ExecResult(None, KillReason.ABORTED)
