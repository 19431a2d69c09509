"""MCP over this process's stdin and stdout, framed by :mod:`~agent_side._mcp._framing`.

While serving, fd 0 reads the null device and fd 1 writes to stderr, so nothing else in the
process (a stray ``print``, a library's warning) can reach the wire; the wire itself is a
private duplicate of each. A line that is not a JSON-RPC message is answered with an error
response here, before the server sees it, and the next line is read as usual.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from ._framing import LineFramer, Oversized, Rejected, decode_line, encode, reject

__all__ = ["stdio_transport"]

READ_CHUNK = 64 * 1024


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@asynccontextmanager
async def _claimed_stdio() -> AsyncIterator[tuple[int, int]]:
    """Private duplicates of fd 0 and 1, with fd 0 on the null device and fd 1 on stderr."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
        yield wire_in, wire_out
    finally:
        os.close(null)
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        for fd in (saved_in, saved_out, wire_in, wire_out):
            os.close(fd)


@asynccontextmanager
async def stdio_transport() -> AsyncIterator[
    tuple[
        MemoryObjectReceiveStream[SessionMessage | Exception],
        MemoryObjectSendStream[SessionMessage],
    ]
]:
    """The server's read and write streams over stdin and stdout; ends when stdin closes."""
    inbound_send, inbound = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outbound, outbound_receive = anyio.create_memory_object_stream[SessionMessage](0)
    answers = outbound.clone()  # the reader's: error responses to lines that are no message

    async def read(wire_in: int) -> None:
        framer = LineFramer()
        async with inbound_send, answers:
            while data := await anyio.to_thread.run_sync(
                os.read, wire_in, READ_CHUNK, abandon_on_cancel=True
            ):
                for line in framer.receive_data(data):
                    decoded = reject(line) if isinstance(line, Oversized) else decode_line(line)
                    if isinstance(decoded, Rejected):
                        await answers.send(SessionMessage(decoded.answer))
                    else:
                        await inbound_send.send(SessionMessage(decoded))

    async def write(wire_out: int) -> None:
        async with outbound_receive:
            async for item in outbound_receive:
                await anyio.to_thread.run_sync(_write_all, wire_out, encode(item.message))

    async with _claimed_stdio() as (wire_in, wire_out), anyio.create_task_group() as group:
        group.start_soon(read, wire_in)
        group.start_soon(write, wire_out)
        yield inbound, outbound
