"""A process that outlives its client, for every transport: a separate Python process starts it
and is SIGKILLed by PID; :func:`replay_and_kill` then checks what another client sees."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from operations import KillReason, ProcessOperations, ProcessState

from ._procscan import survivors

REPO = Path(__file__).resolve().parents[2]
LINES = 3000
COMMAND = f"seq 1 {LINES}; exec sleep 30"
EXPECTED = b"".join(b"%d\n" % i for i in range(1, LINES + 1))
WAIT_S = 30.0


async def start_then_sigkill(starter: str, args: Sequence[object]) -> str:
    """Run ``starter`` (Python source printing the started process's id, then sleeping) with
    ``args``, SIGKILL it once the id is printed; the id."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'proto'}"}
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", starter, *map(str, args), env=env, stdout=subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        async with asyncio.timeout(WAIT_S):
            pid = (await child.stdout.readline()).decode().strip()
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()
    assert pid.startswith("p-"), pid
    return pid


async def _replay(procs: ProcessOperations, pid: str, offset: int) -> bytes:
    got = b""
    async with asyncio.timeout(WAIT_S):
        async for output in procs.attach(pid, from_offset=offset):
            got += output.data
            if len(got) >= len(EXPECTED) - offset:
                break
    return got


async def replay_and_kill(procs: ProcessOperations, pid: str, marker: str) -> None:
    """The process still runs; its output replays byte for byte from 0 and from the middle; a
    kill ends its whole tree (nothing with ``marker`` survives)."""
    assert await _replay(procs, pid, 0) == EXPECTED
    middle = len(EXPECTED) // 2
    assert await _replay(procs, pid, middle) == EXPECTED[middle:]
    (info,) = [p for p in await procs.list_processes() if p.id == pid]
    assert info.state is ProcessState.RUNNING  # its starter is gone; it is not
    assert survivors(marker)
    end = await procs.kill(pid)
    assert end.kill_reason is KillReason.KILLED
    for _ in range(200):  # bounded: the tree is gone once kill returned, give /proc a moment
        if not survivors(marker):
            break
        await asyncio.sleep(0.05)
    assert survivors(marker) == []
