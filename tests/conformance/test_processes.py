"""Processes that outlive a call, on every backend: start, attach with replay, stdin, kill, signal.

The same assertions run on the memory backend's scripted processes, the broker core, and the
core behind gRPC and SSH.
"""

from __future__ import annotations

import asyncio
import re
import signal

import pytest

from operations import (
    InvalidArgument,
    KillReason,
    NotFound,
    ProcessOperations,
    ProcessState,
    PtySize,
)
from tests.conformance._commands import (
    ECHO_HI,
    ON_A_TERMINAL,
    SEQ,
    SHORT_LIMIT_S,
    SLEEP,
    START_THEN_SLEEP,
)
from tests.conformance._workspace import Workspace

WAIT_S = 20.0  # every wait here is bounded


def processes(ws: Workspace) -> ProcessOperations:
    found = ws.ops.processes  # type: ignore[attr-defined]
    assert isinstance(found, ProcessOperations)
    return found


async def output_of(procs: ProcessOperations, id: str, from_offset: int = 0) -> bytes:
    async with asyncio.timeout(WAIT_S):
        return b"".join([o.data async for o in procs.attach(id, from_offset=from_offset)])


async def test_start_output_exit(ws: Workspace) -> None:
    procs = processes(ws)
    info = await procs.start(ECHO_HI, ws.root)
    assert info.id and info.command == ECHO_HI
    async with asyncio.timeout(WAIT_S):
        end = await procs.wait(info.id)
    assert (end.state, end.exit_code, end.kill_reason) == (ProcessState.EXITED, 0, None)
    assert end.bytes_out == 3
    assert await output_of(procs, info.id) == b"hi\n"
    assert info.id in [p.id for p in await procs.list_processes()]


async def test_attach_replays_from_any_offset(ws: Workspace) -> None:
    procs = processes(ws)
    info = await procs.start(SEQ, ws.root)
    async with asyncio.timeout(WAIT_S):
        await procs.wait(info.id)
    whole = await output_of(procs, info.id)
    assert whole == b"".join(b"%d\n" % i for i in range(1, 2001))
    middle = len(whole) // 3
    assert await output_of(procs, info.id, middle) == whole[middle:]
    assert await output_of(procs, info.id, len(whole)) == b""
    with pytest.raises(InvalidArgument, match="between 0 and the output so far"):
        await output_of(procs, info.id, len(whole) + 1)


async def test_stdin_round_trips_through_cat(ws: Workspace) -> None:
    procs = processes(ws)
    info = await procs.start("cat", ws.root)
    data = bytes(range(256)) * 4096 * 10  # 10 MiB
    reader = asyncio.create_task(output_of(procs, info.id))
    for start in range(0, len(data), 65536):
        await procs.write_stdin(info.id, data[start : start + 65536])
    await procs.close_stdin(info.id)
    assert await reader == data
    async with asyncio.timeout(WAIT_S):
        assert (await procs.wait(info.id)).exit_code == 0
    with pytest.raises(InvalidArgument):
        await procs.write_stdin(info.id, b"late")


async def test_a_process_outlives_a_detached_attach_and_is_killed_whole(ws: Workspace) -> None:
    procs = processes(ws)
    info = await procs.start(START_THEN_SLEEP, ws.root)
    async with asyncio.timeout(WAIT_S):
        async for output in procs.attach(info.id):
            assert output.data.startswith(b"start")
            break  # detach
    assert (await procs.list_processes())[-1].state is ProcessState.RUNNING
    end = await procs.kill(info.id)
    assert (end.state, end.exit_code, end.kill_reason) == (
        ProcessState.KILLED,
        None,
        KillReason.KILLED,
    )
    assert await output_of(procs, info.id) == b"start\n"


async def test_a_signal_ends_a_process(ws: Workspace) -> None:
    """The leader ended by a signal the caller sent: no exit status, the signal named (the rule
    of ``ExecResult``), never a made-up ``128 + n``."""
    procs = processes(ws)
    info = await procs.start(SLEEP, ws.root)
    await procs.signal(info.id, signal.SIGTERM)
    async with asyncio.timeout(WAIT_S):
        end = await procs.wait(info.id)
    assert (end.state, end.exit_code, end.signal, end.kill_reason) == (
        ProcessState.EXITED,
        None,
        signal.SIGTERM,
        None,
    )
    assert (await procs.list_processes())[-1].signal == signal.SIGTERM


@pytest.mark.parametrize("limit", ["timeout", "idle_timeout"])
async def test_a_timeout_kills_the_process(ws: Workspace, limit: str) -> None:
    """A lifetime or an idle timeout ends the process with that kill reason, and no exit code."""
    procs = processes(ws)
    info = await procs.start(START_THEN_SLEEP, ws.root, **{limit: SHORT_LIMIT_S})  # type: ignore[arg-type]
    async with asyncio.timeout(WAIT_S):
        end = await procs.wait(info.id)
    want = KillReason.TIMEOUT if limit == "timeout" else KillReason.IDLE_TIMEOUT
    assert (end.state, end.kill_reason, end.exit_code) == (ProcessState.KILLED, want, None)
    assert await output_of(procs, info.id) == b"start\n"  # what it wrote is kept


async def test_bad_requests(ws: Workspace) -> None:
    procs = processes(ws)
    with pytest.raises(NotFound):
        await procs.wait("p-000000000000")
    with pytest.raises(NotFound):
        await procs.kill("nope")
    info = await procs.start(SLEEP, ws.root)
    try:
        with pytest.raises(InvalidArgument):
            await procs.resize(info.id, 80, 24)  # no PTY
        with pytest.raises(InvalidArgument):
            await procs.start(ECHO_HI, ws.root, timeout=0)
    finally:
        await procs.kill(info.id)


async def test_a_pty_is_a_terminal_that_follows_resize(ws: Workspace) -> None:
    """``tty`` names a terminal, ``stty size`` reports the size started with and then the
    resize; the bytes are a cooked terminal's (CR LF line ends, input echoed)."""
    procs = processes(ws)
    info = await procs.start(ON_A_TERMINAL, ws.root, pty=PtySize(cols=91, rows=27))
    assert info.pty == PtySize(91, 27)
    seen = bytearray()
    async with asyncio.timeout(WAIT_S):
        async for output in procs.attach(info.id):
            seen += output.data
            if b"27 91\r\n" in seen:
                break
    await procs.resize(info.id, 120, 40)
    await procs.write_stdin(info.id, b"go\n")
    async with asyncio.timeout(WAIT_S):
        end = await procs.wait(info.id)
    assert (end.state, end.exit_code, end.pty) == (ProcessState.EXITED, 0, PtySize(120, 40))
    whole = re.sub(rb"/dev/pts/\d+", b"/dev/pts/N", await output_of(procs, info.id))
    assert whole == b"/dev/pts/N\r\n27 91\r\ngo\r\n40 120\r\n"


async def test_sigint_ends_a_sleep_on_a_pty(ws: Workspace) -> None:
    """``signal(SIGINT)`` reaches the terminal's foreground job as ``^C`` would: the sleep ends by
    that signal, with no exit status."""
    procs = processes(ws)
    info = await procs.start(SLEEP, ws.root, pty=PtySize(80, 24))
    await procs.signal(info.id, signal.SIGINT)
    async with asyncio.timeout(WAIT_S):
        end = await procs.wait(info.id)
    assert (end.state, end.exit_code, end.signal, end.kill_reason) == (
        ProcessState.EXITED,
        None,
        signal.SIGINT,
        None,
    )
