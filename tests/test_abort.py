"""The cancellation signal and its bridge to task cancellation."""

from __future__ import annotations

import asyncio

import pytest

from operations import AbortController, Aborted, AbortSignal, abort_scope


def test_listeners_fire_once_and_late_listeners_fire_at_once() -> None:
    controller = AbortController()
    calls: list[str] = []
    controller.signal.add_listener(lambda: calls.append("early"))
    remove = controller.signal.add_listener(lambda: calls.append("removed"))
    remove()
    controller.abort("why")
    controller.abort("again")
    controller.signal.add_listener(lambda: calls.append("late"))
    assert calls == ["early", "late"]
    assert controller.signal.aborted and controller.signal.reason == "why"
    with pytest.raises(Aborted, match="read_file 'x'"):
        controller.signal.throw_if_aborted("read_file", "x")


async def test_abort_scope_turns_an_abort_into_aborted_and_runs_finally() -> None:
    controller = AbortController()
    cleaned = asyncio.Event()

    async def body() -> None:
        async with abort_scope(controller.signal, "exec"):
            try:
                await asyncio.sleep(30)
            finally:
                cleaned.set()

    task = asyncio.create_task(body())
    await asyncio.sleep(0.01)
    controller.abort()
    with pytest.raises(Aborted):
        await asyncio.wait_for(task, 5)
    assert cleaned.is_set()


async def test_abort_scope_lets_outside_cancellation_through() -> None:
    controller = AbortController()

    async def body() -> None:
        async with abort_scope(controller.signal, "exec"):
            await asyncio.sleep(30)

    task = asyncio.create_task(body())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    controller.abort()  # after the scope closed: must not cancel anything


async def test_abort_scope_refuses_to_start_when_already_aborted() -> None:
    with pytest.raises(Aborted):
        async with abort_scope(AbortSignal.aborted_signal(), "read_file", "/w/a"):
            pytest.fail("the block must not run")


async def test_abort_scope_without_signal_is_transparent() -> None:
    async with abort_scope(None, "exec"):
        await asyncio.sleep(0)


async def test_signal_wait_returns_after_abort() -> None:
    controller = AbortController()
    waiter = asyncio.create_task(controller.signal.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    controller.abort()
    await asyncio.wait_for(waiter, 5)
