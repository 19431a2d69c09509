"""The gRPC ``Frames`` stream: the framed calls of the SSH subsystem, carried on one gRPC call.

A client keeps a few such streams open and runs one call at a time on each, so a call costs a
message pair on an open stream instead of a new RPC (its headers, its handler task, its status).
:class:`StreamCarrier` moves the bytes; :class:`~._frames.FrameServer` serves the calls, exactly
as on an SSH channel.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Final

import grpc.aio
from opsbroker.v1 import broker_pb2 as pb
from opsbroker.v1.sshframe import bytes_field_message

from ._grpcwire import Undecodable

__all__ = ["MAX_PIECE_BYTES", "StreamCarrier"]

_DATA_FIELD: Final = pb.FrameBytes.DESCRIPTOR.fields_by_name["data"].number

MAX_PIECE_BYTES: Final = 1024 * 1024 + 4096
"""Largest ``FrameBytes`` sent: room for the largest output event (1 MiB) and its headers, and
little more, so that what grpc holds for a stream stays small. Frames are a byte stream: one may
begin in a message and end in the next."""

HIGH_WATER_BYTES: Final = 2 * MAX_PIECE_BYTES
"""Bytes waiting to be written at which a call's sends wait: backpressure."""


class StreamCarrier:
    """The bytes of one ``Frames`` call: read in :meth:`read`, written by a task of its own.

    Replies leave as serialized ``FrameBytes`` built here, the field's tag and length joined with
    the queued frame bytes in one copy (the method's serializer passes bytes as they are), never
    as a message built and serialized (two more copies of every byte of command output)."""

    def __init__(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        self._context = context
        self._pending: collections.deque[bytes | memoryview] = collections.deque()
        self._pending_bytes = 0
        self._wake = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._readable = asyncio.Event()
        self._readable.set()
        self.closed = asyncio.Event()
        self.writer = asyncio.ensure_future(self._write_all())

    async def read(self) -> bytes | None:
        """The next bytes from the client; ``None`` at its end of input."""
        await self._readable.wait()
        message = await self._context.read()
        if message is grpc.aio.EOF:
            return None
        if isinstance(message, Undecodable):
            raise ValueError("a message that is not FrameBytes")
        assert isinstance(message, pb.FrameBytes)
        return message.data

    async def _write_all(self) -> None:
        """Write what is queued, in order, until the carrier closes and the queue is empty (or a
        write fails: the client is gone, and the carrier closes)."""
        try:
            await self._write_queued()
        except Exception:
            self.close()

    async def _write_queued(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                await self._context.write(self._next_piece())
                if self._pending_bytes < HIGH_WATER_BYTES:
                    self._writable.set()
            if self.closed.is_set():
                return

    def _next_piece(self) -> bytes:
        """The next serialized ``FrameBytes``: at most :data:`MAX_PIECE_BYTES` of the queued
        frame parts, in order (the part that crosses the limit is cut, uncopied), joined with
        the field's tag and length in one copy: the only copy of a reply's bytes here."""
        pending = self._pending
        parts: list[bytes | memoryview] = []
        size = 0
        while pending and size < MAX_PIECE_BYTES:
            part = pending[0]
            room = MAX_PIECE_BYTES - size
            if len(part) > room:
                view = memoryview(part)
                part, pending[0] = view[:room], view[room:]
            else:
                pending.popleft()
            parts.append(part)
            size += len(part)
        self._pending_bytes -= size
        return bytes_field_message(_DATA_FIELD, parts)

    # -- the Carrier protocol --

    def writelines(self, parts: list[bytes | memoryview]) -> None:
        self._pending.extend(parts)
        self._pending_bytes += sum(map(len, parts))
        self._wake.set()
        if self._pending_bytes >= HIGH_WATER_BYTES:
            self._writable.clear()

    def pause_reading(self) -> None:
        self._readable.clear()

    def resume_reading(self) -> None:
        self._readable.set()

    def close(self) -> None:
        self.closed.set()
        self._wake.set()
        self._writable.set()

    def is_closing(self) -> bool:
        return self.closed.is_set()

    async def drain(self) -> None:
        await self._writable.wait()
        if self.closed.is_set():
            raise BrokenPipeError("the Frames stream is closed")
