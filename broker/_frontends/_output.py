"""``CommandOutput``: a command's output turned into ``ExecEvent`` messages, for any transport."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable
from typing import Any, Final

from opsbroker.v1 import broker_pb2 as pb
from opsbroker.v1.codec import CHUNK_BYTES

__all__ = ["OUTPUT_BUFFER", "CommandOutput"]

OUTPUT_BUFFER: Final = (
    4 * CHUNK_BYTES
)  # output a command may have pending before its producer waits


class CommandOutput:
    """The ``on_data`` of a command: its output, written in order by one writer task.

    The writer, not the command's producer, does the writes: when the backend cancels its
    producer (a kill), a write is never cut halfway (that would make the next write, the exit
    event, fail). Output that arrives while a write is in flight is merged into the next event,
    up to ``event_bytes`` (what fits one message of the transport), so a command writing in
    small pieces costs few events. The producer waits
    while :data:`OUTPUT_BUFFER` bytes are pending (backpressure); a failed write is raised by
    the next call or by :meth:`drain`.
    """

    __slots__ = (
        "_closed",
        "_event_bytes",
        "_more",
        "_pending",
        "_room",
        "_send",
        "_size",
        "_writer",
    )

    def __init__(
        self, send: Callable[[pb.ExecEvent], Awaitable[None]], *, event_bytes: int
    ) -> None:
        self._send = send
        self._event_bytes = event_bytes
        self._pending: collections.deque[bytes] = collections.deque()
        self._size = 0
        self._more = asyncio.Event()  # output (or the end) waits for the writer
        self._room = asyncio.Event()  # the pending output went below its bound
        self._closed = False
        self._writer: asyncio.Task[None] | None = None

    async def __call__(self, data: bytes) -> None:
        if not data:
            return
        if self._writer is None:
            self._writer = asyncio.ensure_future(self._write_all())
            self._writer.add_done_callback(_retrieve)
        self._pending.append(data)
        self._size += len(data)
        self._more.set()
        while self._size >= OUTPUT_BUFFER:
            if self._writer.done():
                self._writer.result()  # raise what failed it
            self._room.clear()
            await self._room.wait()
        if self._writer.done():
            self._writer.result()

    async def _write_all(self) -> None:
        try:
            while True:
                await self._more.wait()
                self._more.clear()
                while self._pending:
                    event = pb.ExecEvent(output=self._take(self._event_bytes))
                    self._room.set()
                    await self._send(event)
                if self._closed:
                    return
        finally:
            self._room.set()  # a producer waiting for room sees the failure instead

    def _take(self, limit: int) -> bytes:
        """Up to ``limit`` pending bytes, in order, as one piece."""
        pieces = []
        taken = 0
        pending = self._pending
        while pending and taken < limit:
            piece = pending.popleft()
            if taken + len(piece) > limit:
                pending.appendleft(piece[limit - taken :])
                piece = piece[: limit - taken]
            pieces.append(piece)
            taken += len(piece)
        self._size -= taken
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    async def drain(self) -> None:
        """Wait until all output is written; raise what failed a write."""
        if self._writer is None:
            return
        self._closed = True
        self._more.set()
        await asyncio.shield(self._writer)
        self._writer.result()


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
