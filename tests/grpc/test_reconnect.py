"""Reconnects: a read-only call waits for a restarted broker; a call that changes something
fails at once with Unavailable instead of being replayed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from operations import InMemoryOperations, Unavailable

from ._harness import client, serving


async def test_read_only_calls_reconnect_and_changes_do_not(tmp_path: Path) -> None:
    memory = InMemoryOperations({"a": b"1"})
    async with serving(tmp_path, memory) as server:
        address = server.addresses[0]
        port = address.rsplit(":", 1)[1]
        ops = client(server, call_timeout=20.0)
        await ops.open()
    try:
        # The broker is gone: a change fails fast, and nothing is queued for later.
        with pytest.raises(Unavailable):
            await ops.mkdir("/workspace/new")
        # A read waits for the broker to come back on the same address.
        reading = asyncio.create_task(ops.read_file("/workspace/a"))
        await asyncio.sleep(0.2)
        assert not reading.done()
        async with serving(tmp_path, memory, grpc=[f"127.0.0.1:{port}"]):
            assert await asyncio.wait_for(reading, 15) == b"1"
        assert "mkdir" not in [record.op for record in memory.log]
    finally:
        await ops.aclose()
