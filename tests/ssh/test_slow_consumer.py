"""A consumer slower than an exec's timeout over SSH: the client gives up on a broker that is
silent past the timeout plus its grace, not on its own ``on_data`` (as over gRPC)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from operations import ExecResult

from ._harness import broker_over_ssh

pytestmark = pytest.mark.anyio


async def test_a_consumer_slower_than_the_timeout_still_gets_the_exit(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    got: list[bytes] = []

    async def slow(chunk: bytes) -> None:
        got.append(chunk)
        await asyncio.sleep(0.6)

    async with broker_over_ssh(tmp_path, str(root)) as (_, ops):
        ops._frames.grace = 0.3  # the client's wait past the timeout (10 s by default)
        command = "for i in 1 2 3 4 5 6; do echo $i; sleep 0.05; done"
        started = time.monotonic()
        result = await ops.exec(command, str(root), on_data=slow, timeout=0.5)
        took = time.monotonic() - started
    assert result == ExecResult(0)
    assert b"".join(got) == b"1\n2\n3\n4\n5\n6\n"
    assert took > 0.5 + 0.3 + 0.3  # the consumer held the call well past the deadline
