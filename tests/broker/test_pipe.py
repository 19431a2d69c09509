"""The rg pipes' read transport (``broker._pipe``): every byte to end of file, reading paused
while the reader is full, and the fd closed once by us, on either event loop."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from opsbroker import eventloop

from broker._pipe import PipeReadTransport

LIMIT = 1024


def _on(loop: str, test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    with asyncio.Runner(loop_factory=eventloop.loop_factory(loop)) as runner:
        runner.run(test())


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


@pytest.mark.parametrize("loop", eventloop.LOOPS)
def test_a_full_reader_pauses_the_pipe_and_gets_every_byte(loop: str) -> None:
    async def test() -> None:
        r, w = os.pipe()
        reader = asyncio.StreamReader(LIMIT)
        transport = PipeReadTransport(r, reader)
        sent = b"".join(b"%06d\n" % i for i in range(4000))  # 28 KB: fits the pipe
        assert os.write(w, sent) == len(sent)
        for _ in range(50):
            await asyncio.sleep(0.001)
            if not transport.is_reading():
                break
        assert not transport.is_reading()  # paused: the reader holds more than 2 x LIMIT
        os.close(w)
        got = b""
        async with asyncio.timeout(10):
            while line := await reader.readline():
                got += line
        assert got == sent and reader.at_eof()
        assert not transport.is_closing() and not _closed(r)
        transport.close()
        transport.close()
        assert transport.is_closing() and _closed(r)

    _on(loop, test)


@pytest.mark.parametrize("loop", eventloop.LOOPS)
def test_close_while_reading_closes_the_fd_and_the_loop_forgets_it(loop: str) -> None:
    async def test() -> None:
        r, w = os.pipe()
        transport = PipeReadTransport(r, asyncio.StreamReader(LIMIT))
        assert transport.is_reading()
        transport.close()
        assert _closed(r) and not transport.is_reading()
        # The number is free again: reusing it for a new pipe must not wake the old reader.
        r2, w2 = os.pipe()
        reader2 = asyncio.StreamReader(LIMIT)
        second = PipeReadTransport(r2, reader2)
        os.write(w2, b"ok\n")
        async with asyncio.timeout(10):
            assert await reader2.readline() == b"ok\n"
        second.close()
        for fd in (w, w2):
            os.close(fd)

    _on(loop, test)
