"""Process checks for cancellation tests: find processes by a unique marker in their argv."""

from __future__ import annotations

import asyncio
import os
import secrets


def marker() -> str:
    """A number no other process on the machine has in its argv (used as ``sleep MARKER``)."""
    return str(500_000 + secrets.randbelow(400_000))


def pids_with(mark: str) -> list[int]:
    """PIDs of live (non-zombie) processes whose argv contains ``mark`` as a word."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as file:
                argv = file.read().split(b"\0")
            with open(f"/proc/{name}/stat", "rb") as file:
                state = file.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state != b"Z" and mark.encode() in argv:
            found.append(int(name))
    return found


async def wait_for(predicate: object, timeout: float) -> bool:
    """Poll ``predicate()`` every 20 ms until true or ``timeout`` seconds have passed."""
    assert callable(predicate)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if predicate():
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(0.02)
