"""A process started over SSH outlives its client: the starting client (its own Python process)
is SIGKILLed, another client with the same key attaches and replays the output byte for byte,
from 0 and from the middle, then kills the tree, and nothing of it survives."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from broker import Broker
from operations import KillReason, ProcessState
from tests.broker._procscan import new_marker, survivors

from ._harness import serve_over_ssh
from ._procs import wait_for

REPO = Path(__file__).resolve().parents[2]
LINES = 3000
WAIT_S = 30.0

_STARTER = textwrap.dedent(
    """
    import asyncio, sys
    from agent_side._remote.ssh import SSHBackend

    async def main(port, key, known_hosts, root, marker, command):
        env = {"OPSBROKER_TEST_MARK": marker}
        backend = SSHBackend(
            "127.0.0.1", int(port), username="agent", client_keys=[key], known_hosts=known_hosts
        )
        async with backend as ops:
            info = await ops.processes.start(command, root, env=env)
            print(info.id, flush=True)
            await asyncio.sleep(3600)  # killed long before

    asyncio.run(main(*sys.argv[1:7]))
    """
)


async def test_attach_after_the_starting_client_was_sigkilled(tmp_path: Path) -> None:
    marker = new_marker()
    command = f"seq 1 {LINES}; exec sleep 30"
    expected = b"".join(b"%d\n" % i for i in range(1, LINES + 1))
    root = tmp_path / "ROOT"
    root.mkdir()
    async with Broker(str(root)) as broker, serve_over_ssh(broker, tmp_path / "keys") as setup:
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'proto'}"}
        args = [setup.port, setup.client_key, setup.known_hosts, root, marker, command]
        starter = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _STARTER, *map(str, args), env=env, stdout=subprocess.PIPE
        )
        try:
            assert starter.stdout is not None
            async with asyncio.timeout(WAIT_S):
                pid = (await starter.stdout.readline()).decode().strip()
        finally:
            starter.send_signal(signal.SIGKILL)
            await starter.wait()
        assert pid.startswith("p-"), pid
        async with setup.backend() as ops:
            procs = ops.processes
            async with asyncio.timeout(WAIT_S):
                got = b""
                async for output in procs.attach(pid):
                    got += output.data
                    if len(got) >= len(expected):
                        break
            assert got == expected
            middle = len(expected) // 2
            async with asyncio.timeout(WAIT_S):
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
        assert await wait_for(lambda: survivors(marker) == [], WAIT_S), survivors(marker)
