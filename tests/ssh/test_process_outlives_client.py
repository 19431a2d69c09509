"""A process started over SSH outlives its client: the starting client (its own Python process)
is SIGKILLed, another client with the same key attaches and replays the output byte for byte,
from 0 and from the middle, then kills the tree, and nothing of it survives."""

from __future__ import annotations

import textwrap
from pathlib import Path

from broker import Broker
from tests.broker._outlives import COMMAND, replay_and_kill, start_then_sigkill
from tests.broker._procscan import new_marker

from ._harness import serve_over_ssh

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
    root = tmp_path / "ROOT"
    root.mkdir()
    async with Broker(str(root)) as broker, serve_over_ssh(broker, tmp_path / "keys") as setup:
        args = [setup.port, setup.client_key, setup.known_hosts, root, marker, COMMAND]
        pid = await start_then_sigkill(_STARTER, args)
        async with setup.backend() as ops:
            await replay_and_kill(ops.processes, pid, marker)
