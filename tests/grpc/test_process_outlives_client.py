"""A process started over gRPC outlives its client: the starting client is SIGKILLed, another
client of the same principal attaches and replays the output byte for byte, from 0 and from the
middle, then kills the tree, and nothing of it survives."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.broker._outlives import COMMAND, replay_and_kill, start_then_sigkill
from tests.broker._procscan import new_marker

from ._harness import client, serving, token_of

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
    async with serving(tmp_path, None) as server:
        args = [server.addresses[0], token_of(server), tmp_path / "ROOT", marker, COMMAND]
        pid = await start_then_sigkill(_STARTER, args)
        async with client(server) as ops:
            await replay_and_kill(ops.processes, pid, marker)
