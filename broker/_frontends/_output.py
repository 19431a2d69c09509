"""``CommandOutput``: a command's output turned into ``ExecEvent`` messages, for any transport."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

from opsbroker.v1 import broker_pb2 as pb
from opsbroker.v1.codec import CHUNK_BYTES

__all__ = ["OUTPUT_BUFFER", "OUTPUT_FIELD", "CommandOutput", "OutputSend", "Piece"]

OUTPUT_BUFFER: Final = (
    4 * CHUNK_BYTES
)  # output a command may have pending before its producer waits


OUTPUT_FIELD: Final = pb.ExecEvent.DESCRIPTOR.fields_by_name["output"].number
"""The number of ``ExecEvent.output``, the field :meth:`OutputSend.output` frames its pieces as."""

Piece = bytes | memoryview
"""Pending output: what the command wrote, or the rest of it once a part went in an event."""


class OutputSend(Protocol):
    """A call's ``send`` that also takes output as raw pieces (``send.output``): the transport
    frames them as the bytes of ``ExecEvent(output=b"".join(pieces))`` without building that
    message (which copies the output twice more)."""

    def __call__(self, message: pb.ExecEvent) -> Awaitable[None]: ...

    def output(self, pieces: list[Piece], size: int) -> Awaitable[None]: ...


class CommandOutput:
    """The ``on_data`` of a command: its output, written in order by one writer task.

    The writer, not the command's producer, does the writes: when the backend cancels its
    producer (a kill), a write is never cut halfway (that would make the next write, the exit
    event, fail). Output that arrives while a write is in flight is merged into the next event,
    up to ``event_bytes`` (what fits one message of the transport), so a command writing in
    small pieces costs few events. The producer waits
    while :data:`OUTPUT_BUFFER` bytes are pending (backpressure); a failed write is raised by
    the next call or by :meth:`drain`.

    A ``send`` with an ``output`` member (:class:`OutputSend`) is handed each event's output as
    the pieces it is made of, uncopied; any other gets ``ExecEvent`` messages.
    """

    __slots__ = (
        "_closed",
        "_event_bytes",
        "_more",
        "_output",
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
        self._output: Callable[[list[Piece], int], Awaitable[None]] | None = getattr(
            send, "output", None
        )
        self._event_bytes = event_bytes
        self._pending: collections.deque[Piece] = collections.deque()
        self._size = 0
        self._more = asyncio.Event()  # output (or the end) waits for the writer
        self._room = asyncio.Event()  # the pending output went below its bound
        self._closed = False
        self._writer: asyncio.Task[None] | None = None

    async def __call__(self, data: bytes) -> None:
        if not data:
            return
        if type(data) is not bytes:  # pending pieces are viewed, never a buffer that may change
            data = bytes(data)
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
                    pieces, size = self._take(self._event_bytes)
                    self._room.set()
                    if self._output is not None:
                        await self._output(pieces, size)
                        continue
                    # (joining one bytes object returns it: no copy)
                    await self._send(pb.ExecEvent(output=b"".join(pieces)))
                if self._closed:
                    return
        finally:
            self._room.set()  # a producer waiting for room sees the failure instead

    def _take(self, limit: int) -> tuple[list[Piece], int]:
        """Up to ``limit`` pending bytes, in order: the pieces (a piece cut at the limit is
        split into two views, nothing is copied) and their size."""
        pieces: list[Piece] = []
        taken = 0
        pending = self._pending
        while pending and taken < limit:
            piece = pending.popleft()
            if taken + len(piece) > limit:
                view = memoryview(piece)
                pending.appendleft(view[limit - taken :])
                piece = view[: limit - taken]
            pieces.append(piece)
            taken += len(piece)
        self._size -= taken
        return pieces, taken

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
