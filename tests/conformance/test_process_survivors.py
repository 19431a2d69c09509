"""Zero survivors on every backend: a started process from the escape catalogue (``setsid``,
double fork, ``nohup``, ignoring SIGTERM) leaves nothing behind once ``kill``, its lifetime or
its idle timeout has ended it.

On a disk backend survivors are counted by scanning ``/proc`` for an environment marker the
test gave the command, never by asking the backend; on the memory backend (scripted processes)
nothing may be left running in ``list_processes()``. Shutdown is checked on the backends whose
object owns the processes (memory and the local core; gRPC and SSH serve that same core, and a
client that closes leaves its processes running by design).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker import Broker
from operations import (
    InMemoryOperations,
    KillReason,
    ProcessInfo,
    ProcessOperations,
    ProcessState,
)
from tests.broker._procscan import MARK_VAR, kill_pids, new_marker, survivors
from tests.conformance._commands import ESCAPES, SHORT_LIMIT_S
from tests.conformance._workspace import DiskWorkspace, Workspace
from tests.conformance.conftest import BACKENDS
from tests.ssh._procs import wait_for

WAIT_S = 30.0  # every wait here is bounded; generous, the machine is shared
ENDINGS = {
    "kill": KillReason.KILLED,
    "timeout": KillReason.TIMEOUT,
    "idle_timeout": KillReason.IDLE_TIMEOUT,
}


OWNERS = sorted(name for name in BACKENDS if name == "memory" or name.startswith("local-"))
"""The backends whose object is the one that runs the processes, so closing it shuts them down."""


@pytest.fixture(params=OWNERS)
async def owner_ws(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Workspace]:
    async with BACKENDS[request.param](tmp_path) as workspace:
        assert isinstance(workspace.ops, Broker | InMemoryOperations)
        yield workspace


def processes(ws: Workspace) -> ProcessOperations:
    found = ws.ops.processes  # type: ignore[attr-defined]
    assert isinstance(found, ProcessOperations)
    return found


async def until_started(procs: ProcessOperations, id: str) -> None:
    seen = b""
    async with asyncio.timeout(WAIT_S):
        async for output in procs.attach(id):
            seen += output.data
            if b"started" in seen:
                return
    raise AssertionError(f"{id} ended without saying started: {seen!r}")


@contextlib.asynccontextmanager
async def escape_started(
    ws: Workspace, escape: str, **limits: float
) -> AsyncIterator[tuple[ProcessOperations, ProcessInfo, str]]:
    """``escape`` started with a fresh marker and seen up (on disk: the leader and the child that
    tries to escape); whatever of it is left when the test ends is killed by PID."""
    procs = processes(ws)
    marker = new_marker()
    on_disk = isinstance(ws, DiskWorkspace)
    try:
        info = await procs.start(ESCAPES[escape], ws.root, env={MARK_VAR: marker}, **limits)  # type: ignore[arg-type]
        await until_started(procs, info.id)
        if on_disk:
            assert await wait_for(lambda: len(survivors(marker)) >= 2, WAIT_S), survivors(marker)
        yield procs, info, marker
    finally:
        if on_disk:
            kill_pids(survivors(marker))


async def assert_nothing_left(ws: Workspace, procs: ProcessOperations, marker: str) -> None:
    """No process runs, by the backend's list and, on disk, by a ``/proc`` scan for ``marker``."""
    assert [p.id for p in await procs.list_processes() if p.running] == []
    if isinstance(ws, DiskWorkspace):
        assert await wait_for(lambda: survivors(marker) == [], WAIT_S), survivors(marker)


@pytest.mark.parametrize("ending", sorted(ENDINGS))
@pytest.mark.parametrize("escape", sorted(ESCAPES))
async def test_nothing_survives(ws: Workspace, escape: str, ending: str) -> None:
    limits = {} if ending == "kill" else {ending: SHORT_LIMIT_S}
    async with escape_started(ws, escape, **limits) as (procs, info, marker):
        async with asyncio.timeout(WAIT_S):
            end = await (procs.kill(info.id) if ending == "kill" else procs.wait(info.id))
        assert (end.state, end.kill_reason, end.exit_code) == (
            ProcessState.KILLED,
            ENDINGS[ending],
            None,
        )
        await assert_nothing_left(ws, procs, marker)


@pytest.mark.parametrize("escape", sorted(ESCAPES))
async def test_nothing_survives_shutdown(owner_ws: Workspace, escape: str) -> None:
    """Closing the backend kills every running tree (``KillReason.SHUTDOWN``)."""
    async with escape_started(owner_ws, escape) as (procs, info, marker):
        waiting = asyncio.create_task(procs.wait(info.id))
        await asyncio.sleep(0)  # the wait has found the record before the backend closes
        async with asyncio.timeout(WAIT_S):
            await owner_ws.ops.aclose()
            end = await waiting
        assert (end.state, end.kill_reason) == (ProcessState.KILLED, KillReason.SHUTDOWN)
        await assert_nothing_left(owner_ws, procs, marker)
