"""Command output, for every transport: merged into few events, in order, bounded, failures
surfaced."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker._frontends._output import OUTPUT_BUFFER, CommandOutput
from broker._frontends._service import OUTPUT_EVENT_BYTES

pytestmark = pytest.mark.anyio


class SlowContext:
    """A call context whose writes take a while, as a busy client's do."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.events: list[bytes] = []
        self.fail_after = fail_after

    async def write(self, event: Any) -> None:
        if self.fail_after is not None and len(self.events) >= self.fail_after:
            raise ConnectionError("client went away")
        await asyncio.sleep(0.002)
        self.events.append(event.output)


async def test_small_pieces_are_merged_in_order_and_bounded() -> None:
    context = SlowContext()
    output = CommandOutput(context.write, event_bytes=OUTPUT_EVENT_BYTES)
    pieces = [bytes([i % 251]) * (4096 + i) for i in range(600)]  # about 4 MiB in small pieces
    peak = 0
    for piece in pieces:
        await output(piece)
        peak = max(peak, output._size)
    await output.drain()
    assert b"".join(context.events) == b"".join(pieces)
    assert len(context.events) < len(pieces) / 10  # merged while writes were in flight
    assert max(map(len, context.events)) <= OUTPUT_EVENT_BYTES
    assert peak < OUTPUT_BUFFER + max(map(len, pieces))  # the producer waited: backpressure


async def test_a_large_piece_is_split_into_events() -> None:
    context = SlowContext()
    output = CommandOutput(context.write, event_bytes=OUTPUT_EVENT_BYTES)
    data = bytes(range(256)) * (3 * OUTPUT_EVENT_BYTES // 256 + 7)
    await output(data)
    await output.drain()
    assert b"".join(context.events) == data
    assert max(map(len, context.events)) <= OUTPUT_EVENT_BYTES


async def test_a_failed_write_reaches_the_producer() -> None:
    output = CommandOutput(SlowContext(fail_after=1).write, event_bytes=OUTPUT_EVENT_BYTES)
    with pytest.raises(ConnectionError):
        for _ in range(1000):
            await output(b"x" * 65536)
    with pytest.raises(ConnectionError):
        await output.drain()


async def test_no_output_no_writer() -> None:
    context = SlowContext()
    output = CommandOutput(context.write, event_bytes=OUTPUT_EVENT_BYTES)
    await output(b"")
    await output.drain()
    assert context.events == []


class RawContext:
    """A ``send`` that takes output as raw pieces (``output``), as the SSH front-end's does."""

    def __init__(self) -> None:
        self.pieces: list[list[bytes | memoryview]] = []
        self.messages: list[Any] = []

    async def __call__(self, message: Any) -> None:
        self.messages.append(message)

    async def output(self, pieces: list[bytes | memoryview], size: int) -> None:
        assert size == sum(map(len, pieces)) <= OUTPUT_EVENT_BYTES
        await asyncio.sleep(0.001)
        self.pieces.append(pieces)


async def test_a_raw_send_gets_the_output_uncopied_in_order() -> None:
    context = RawContext()
    output = CommandOutput(context, event_bytes=OUTPUT_EVENT_BYTES)
    chunks = [bytes([i]) * (OUTPUT_EVENT_BYTES // 3 + i) for i in range(12)]
    for chunk in chunks:
        await output(chunk)
    await output.drain()
    assert context.messages == []
    assert b"".join(b"".join(p) for p in context.pieces) == b"".join(chunks)
    split = [
        piece for pieces in context.pieces for piece in pieces if isinstance(piece, memoryview)
    ]
    assert split and all(isinstance(view.obj, bytes) for view in split)  # views, not copies


async def test_a_buffer_that_changes_after_the_call_is_not_aliased() -> None:
    context = RawContext()
    output = CommandOutput(context, event_bytes=OUTPUT_EVENT_BYTES)
    data = bytearray(b"a" * 1000)
    await output(data)  # type: ignore[arg-type]
    data[:] = b"b" * 1000
    await output.drain()
    assert b"".join(b"".join(p) for p in context.pieces) == b"a" * 1000
