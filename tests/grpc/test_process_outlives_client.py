"""A process started over gRPC outlives its client: the starting client is SIGKILLed, another
client of the same principal attaches and replays the output byte for byte, from 0 and from the
middle, then kills the tree, and nothing of it survives."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from operations import KillReason, ProcessState
from tests.broker._procscan import new_marker, survivors

from ._harness import client, serving, token_of

REPO = Path(__file__).resolve().parents[2]
LINES = 3000

_STARTER = textwrap.dedent(
    """
    import asyncio, sys
    from agent_side import connect

    async def main(address, token, root, marker, command):
        env = {"OPSBROKER_TEST_MARK": marker}
        async with connect(f"grpc://{address}", token=token) as ops:
            info = await ops.processes.start(command, root, env=env)
            print(info.id, flush=True)
            await asyncio.sleep(3600)  # killed long before

    asyncio.run(main(*sys.argv[1:6]))
    """
)


async def test_attach_after_the_starting_client_was_sigkilled(tmp_path: Path) -> None:
    marker = new_marker()
    command = f"seq 1 {LINES}; exec sleep 30"
    expected = b"".join(b"%d\n" % i for i in range(1, LINES + 1))
    async with serving(tmp_path, None) as server:
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'proto'}"}
        args = [server.addresses[0], token_of(server), str(tmp_path / "ROOT"), marker, command]
        starter = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _STARTER, *args, env=env, stdout=subprocess.PIPE
        )
        try:
            assert starter.stdout is not None
            async with asyncio.timeout(30):
                pid = (await starter.stdout.readline()).decode().strip()
        finally:
            starter.send_signal(signal.SIGKILL)
            await starter.wait()
        assert pid.startswith("p-")
        async with client(server) as ops:
            procs = ops.processes
            async with asyncio.timeout(30):
                got = b""
                async for output in procs.attach(pid):
                    got += output.data
                    if len(got) >= len(expected):
                        break
            assert got == expected
            middle = len(expected) // 2
            async with asyncio.timeout(30):
                tail = b""
                async for output in procs.attach(pid, from_offset=middle):
                    tail += output.data
                    if len(tail) >= len(expected) - middle:
                        break
            assert tail == expected[middle:]
            (info,) = [p for p in await procs.list_processes() if p.id == pid]
            assert info.state is ProcessState.RUNNING  # its starter is gone; it is not
            assert survivors(marker)
            end = await procs.kill(pid)
            assert end.kill_reason is KillReason.KILLED
        for _ in range(100):  # bounded: the tree is gone once kill returned, give /proc a moment
            if not survivors(marker):
                break
            await asyncio.sleep(0.05)
        assert survivors(marker) == []
