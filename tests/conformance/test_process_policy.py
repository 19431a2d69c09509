"""The ``[process]`` policy on every backend: a small ring reports what it dropped, and starts
beyond the per-principal or per-broker limit are refused with the rule and what to do next.

Each test opens its backend with the policy it needs (``process_policy=`` of every opener in
``tests/conformance/backends/``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Protocol, cast

import pytest

from operations import PolicyDenied, ProcessOperations, ProcessPolicy, ProcessState
from tests.conformance._commands import SEQ, SHORT_LIMIT_S, SLEEP
from tests.conformance._workspace import Workspace
from tests.conformance.conftest import BACKENDS

WAIT_S = 20.0  # every wait here is bounded
RING = 4096
WHOLE = b"".join(b"%d\n" % i for i in range(1, 2001))


class PolicyOpener(Protocol):
    def __call__(
        self, tmp_path: Path, *, process_policy: ProcessPolicy | None = None
    ) -> AbstractAsyncContextManager[Workspace]: ...


OpenWith = Callable[[ProcessPolicy], AbstractAsyncContextManager[Workspace]]


@pytest.fixture(params=sorted(BACKENDS))
def open_with(request: pytest.FixtureRequest, tmp_path: Path) -> OpenWith:
    """Opens the backend under test with a given ``[process]`` policy."""
    opener = cast(PolicyOpener, BACKENDS[request.param])
    return lambda policy: opener(tmp_path, process_policy=policy)


def processes(ws: Workspace) -> ProcessOperations:
    found = ws.ops.processes  # type: ignore[attr-defined]
    assert isinstance(found, ProcessOperations)
    return found


async def test_ring_overflow_reports_the_dropped_count(open_with: OpenWith) -> None:
    """Output beyond the ring is gone, and an attach from behind it is told how much, never
    silently: the first piece carries ``dropped`` and starts where the ring does."""
    async with open_with(ProcessPolicy(ring_bytes=RING)) as ws:
        procs = processes(ws)
        info = await procs.start(SEQ, ws.root)
        async with asyncio.timeout(WAIT_S):
            end = await procs.wait(info.id)
        assert (end.state, end.exit_code, end.bytes_out) == (ProcessState.EXITED, 0, len(WHOLE))
        lost = len(WHOLE) - RING
        for from_offset in (0, lost // 2):
            async with asyncio.timeout(WAIT_S):
                pieces = [p async for p in procs.attach(info.id, from_offset=from_offset)]
            assert pieces[0].offset == lost
            assert pieces[0].dropped == lost - from_offset
            assert sum(p.dropped for p in pieces) == lost - from_offset
            assert b"".join(p.data for p in pieces) == WHOLE[lost:]
        inside = len(WHOLE) - 100  # still held: nothing dropped
        async with asyncio.timeout(WAIT_S):
            pieces = [p async for p in procs.attach(info.id, from_offset=inside)]
        assert [p.dropped for p in pieces] == [0] * len(pieces)
        assert b"".join(p.data for p in pieces) == WHOLE[inside:]


@pytest.mark.parametrize(
    ("policy", "rule", "reason"),
    [
        (
            ProcessPolicy(max_per_principal=2, max_total=10),
            "process.max_per_principal: 2",
            "2 processes are running for this principal, the most it may have; kill one "
            "(kill_process) or wait for one to end, then start again",
        ),
        (
            ProcessPolicy(max_per_principal=10, max_total=2),
            "process.max_total: 2",
            "2 processes are running on this broker, the most it may have; kill one "
            "(kill_process) or wait for one to end, then start again",
        ),
    ],
    ids=["per_principal", "per_broker"],
)
async def test_a_start_over_a_limit_is_refused(
    open_with: OpenWith, policy: ProcessPolicy, rule: str, reason: str
) -> None:
    """The third start is refused with the rule and a message that says what to do; once one
    has ended (a finished process does not count), a start succeeds again."""
    async with open_with(policy) as ws:
        procs = processes(ws)
        first = await procs.start(SLEEP, ws.root)
        second = await procs.start(SLEEP, ws.root)
        try:
            with pytest.raises(PolicyDenied) as denied:
                await procs.start(SLEEP, ws.root)
            assert denied.value.rule == rule
            assert str(denied.value) == f"start_process {ws.root!r}: {reason}"
            running = [p for p in await procs.list_processes() if p.running]
            assert sorted(p.id for p in running) == sorted([first.id, second.id])
            await procs.kill(first.id)
            third = await procs.start(SLEEP, ws.root)
            await procs.kill(third.id)
        finally:
            await procs.kill(second.id)


BIG_SEQ = 300_000
"""``seq 1 BIG_SEQ`` writes about 2 MB: more than a pipe, the ring and a read together hold."""


async def test_a_process_with_backpressure_waits_for_its_slow_attacher(
    open_with: OpenWith,
) -> None:
    """With ``backpressure`` a ring far smaller than the output loses nothing: while no one
    reads, the process waits (it is still running, its output cut short); a slow attacher then
    gets every byte, none dropped, and the process exits 0."""
    whole = b"".join(b"%d\n" % i for i in range(1, BIG_SEQ + 1))
    async with open_with(ProcessPolicy(ring_bytes=RING)) as ws:
        procs = processes(ws)
        info = await procs.start(f"seq 1 {BIG_SEQ}", ws.root, backpressure=True)
        await asyncio.sleep(1.0)  # nobody reads: the ring fills and the process waits
        (now,) = [p for p in await procs.list_processes() if p.id == info.id]
        assert now.state is ProcessState.RUNNING and now.bytes_out < len(whole)
        received = []
        async with asyncio.timeout(WAIT_S):
            async for piece in procs.attach(info.id):
                received.append(piece)
                if len(received) % 100 == 0:
                    await asyncio.sleep(0.05)  # a reader slower than seq
            end = await procs.wait(info.id)
        assert sum(p.dropped for p in received) == 0
        assert b"".join(p.data for p in received) == whole
        assert (end.state, end.exit_code, end.bytes_out) == (ProcessState.EXITED, 0, len(whole))


async def test_a_process_held_by_its_reader_is_not_idle(open_with: OpenWith) -> None:
    """The idle timeout counts time without output; a process whose output waits for a slow
    reader has output, so it is not killed as idle however long the reader takes."""
    async with open_with(ProcessPolicy(ring_bytes=RING)) as ws:
        procs = processes(ws)
        info = await procs.start(
            f"seq 1 {BIG_SEQ}", ws.root, backpressure=True, idle_timeout=SHORT_LIMIT_S
        )
        await asyncio.sleep(SHORT_LIMIT_S * 1.5)  # held back all along by nobody reading
        async with asyncio.timeout(WAIT_S):
            data = b"".join([piece.data async for piece in procs.attach(info.id)])
            end = await procs.wait(info.id)
        assert (end.state, end.kill_reason, end.exit_code) == (ProcessState.EXITED, None, 0)
        assert data == b"".join(b"%d\n" % i for i in range(1, BIG_SEQ + 1))


async def test_a_process_held_by_its_reader_is_killed_at_once(open_with: OpenWith) -> None:
    """``kill`` ends a process whose output waits for a reader that never comes, without
    waiting for one, and its record says it was killed; one left so at shutdown ends too."""
    async with asyncio.timeout(WAIT_S), open_with(ProcessPolicy(ring_bytes=RING)) as ws:
        procs = processes(ws)
        info = await procs.start(f"seq 1 {BIG_SEQ}", ws.root, backpressure=True)
        await procs.start(f"seq 1 {BIG_SEQ}", ws.root, backpressure=True)  # left to shutdown
        await asyncio.sleep(0.5)  # the rings and the pipes fill; nobody reads
        end = await procs.kill(info.id)
        assert end.state is ProcessState.KILLED
        assert end.bytes_out < len(b"".join(b"%d\n" % i for i in range(1, BIG_SEQ + 1)))
