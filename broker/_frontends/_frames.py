"""Framed calls of the one service table over one byte stream, one call at a time.

The ``opsbroker`` SSH subsystem and the gRPC ``Frames`` stream carry the same frames
(:mod:`opsbroker.v1.sshframe`); :class:`FrameServer` is what serves them, whatever carries the
bytes. A carrier (:class:`Carrier`) only moves bytes: it feeds what arrives to
:meth:`FrameServer.data` and :meth:`FrameServer.eof`, writes what the server hands it, pauses its
reading when told, and tells the server when it is gone (:meth:`FrameServer.lost`).

**Cancellation:** a ``CANCEL`` frame, :meth:`FrameServer.cancel_by_client` (an SSH ``signal``
request) or the loss of the carrier cancels the running call; the backend then kills the command
tree before the call ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Final, Protocol

from google.protobuf.message import Message as ProtoMessage
from opsbroker.v1.codec import error_to_wire
from opsbroker.v1.sshframe import (
    NEED_DATA,
    Cancel,
    End,
    EndOfInput,
    FrameConnection,
    Message,
    ProtocolError,
    Request,
    Role,
    State,
    bytes_field_prefix,
)

from operations import Aborted, Backend, InvalidArgument, OpsError, TooLarge

from ._output import OUTPUT_FIELD, Piece
from ._service import CHUNK_FIELD, METHODS, Method, Service, call_subject, decode, log_call

__all__ = ["COALESCE_BYTES", "INBOUND_HIGH_WATER", "INBOUND_LOW_WATER", "Carrier", "FrameServer"]

INBOUND_HIGH_WATER: Final = 64
"""Buffered client messages (64 KiB chunks) at which a carrier stops reading: backpressure."""

INBOUND_LOW_WATER: Final = 16
"""Buffered client messages at which a paused carrier reads again."""

COALESCE_BYTES: Final = 128 * 1024
"""Queued reply bytes that are written at once instead of at the end of the loop iteration: a
file piece or output event that fills an SSH packet (``ssh.CHANNEL_MAX_PACKET``) is not held."""


class Carrier(Protocol):
    """What moves a :class:`FrameServer`'s bytes: an SSH channel, a gRPC stream."""

    def writelines(self, parts: list[Piece]) -> None:
        """Queue ``b"".join(parts)`` to be sent, in order (never blocks; ``parts`` is the
        carrier's from now on, and the bytes its views are of never change)."""

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def close(self) -> None:
        """End the carrier (the client sees it closed once what was written has left)."""

    def is_closing(self) -> bool: ...

    async def drain(self) -> None:
        """Wait until the carrier takes more; raise ``BrokenPipeError`` once it is closed."""


class FrameServer:
    """The calls framed on one carrier, served by ``service`` on ``ops`` as ``principal``.

    Args:
        carrier: what moves the bytes.
        service: the one service table's handlers.
        ops: the backend the calls use (already behind the broker's policy and audit).
        principal: who the calls run as (logged with each call).
        max_frame_size: the largest frame accepted or sent.
        calls: where each running call's task is kept while it runs (for shutdown).
        log: where each call is logged.
    """

    def __init__(
        self,
        carrier: Carrier,
        service: Service,
        ops: Backend,
        principal: str,
        *,
        max_frame_size: int,
        calls: set[asyncio.Task[None]],
        log: logging.Logger,
    ) -> None:
        self.carrier = carrier
        self.service = service
        self.ops = ops
        self.principal = principal
        self.frames = FrameConnection(Role.SERVER, max_frame_size=max_frame_size)
        self.task: asyncio.Task[None] | None = None
        self.closing = False  # end the carrier once no call runs (broker shutdown)
        self.protocol_error: str | None = None  # why the carrier was closed, if for bad frames
        self._calls = calls
        self._log = log
        self._cancel_requested = False
        self._inbound: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._read_paused = False
        self._pending: list[Piece] = []
        self._pending_bytes = 0

    # -- what the carrier reports --

    def data(self, data: bytes) -> None:
        self.frames.receive_data(data)
        self._pump()

    def eof(self) -> None:
        self.frames.receive_data(b"")
        self._pump()

    def lost(self) -> None:
        """The carrier is gone: the running call is cancelled (its tree killed)."""
        self._cancel_requested = False
        self._cancel()

    def cancel_by_client(self) -> None:
        """The client asked to stop the running call (it still gets END)."""
        self._cancel_requested = True
        asyncio.get_running_loop().call_soon(self._cancel)

    def close_when_idle(self) -> None:
        """End the carrier now if no call runs, else once the running call has ended."""
        self.closing = True
        if self.task is None:
            self._flush()
            self.carrier.close()

    # -- frames in --

    def _pump(self) -> None:
        """Handle every complete frame received so far."""
        frames = self.frames
        while True:
            try:
                event = frames.next_event()
            except ProtocolError as exc:
                self._log.warning("opsbroker frames: %s; closing the stream", exc)
                self.protocol_error = str(exc)
                self._cancel()
                self.carrier.close()
                return
            if event is NEED_DATA:
                if frames.closed_by_peer and self.task is None:
                    self.carrier.close()
                return
            if isinstance(event, Request):
                self._cancel_requested = False
                self._inbound = asyncio.Queue()
                self._start(self._run_call(event.method, event.message, self._inbound))
            elif isinstance(event, Message):
                self._inbound.put_nowait(event.message)
                if self._inbound.qsize() >= INBOUND_HIGH_WATER:
                    self._read_paused = True
                    self.carrier.pause_reading()
            elif isinstance(event, EndOfInput):
                self._inbound.put_nowait(None)
            elif isinstance(event, Cancel):
                self.cancel_by_client()
            self._maybe_next_call()

    def _maybe_next_call(self) -> None:
        if self.frames.our_state is State.DONE and self.frames.their_state is State.DONE:
            self.frames.start_next_call()

    def _start(self, coro: Coroutine[object, object, None]) -> None:
        assert self.task is None
        self.task = task = asyncio.ensure_future(coro)
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    def _cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()

    async def receive(self, inbound: asyncio.Queue[bytes | None]) -> bytes | None:
        item = await inbound.get()
        if self._read_paused and inbound.qsize() <= INBOUND_LOW_WATER:
            self._read_paused = False
            self.carrier.resume_reading()
        return item

    # -- frames out --

    def _write(self, parts: list[Piece]) -> None:
        """Queue a frame's parts; they leave together at the end of this loop iteration (a reply
        and its END share one packet), or at once when :data:`COALESCE_BYTES` are waiting. The
        carrier joins them, once."""
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._flush)
        self._pending += parts
        self._pending_bytes += sum(map(len, parts))
        if self._pending_bytes >= COALESCE_BYTES:
            self._flush()

    def _flush(self) -> None:
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        if pending and not self.carrier.is_closing():
            self.carrier.writelines(pending)

    async def send(self, message: ProtoMessage) -> None:
        payload = message.SerializeToString()
        await self._send_message([payload], len(payload))

    async def send_bytes_field(self, field: int, pieces: list[Piece], size: int) -> None:
        """Send the message whose only field is bytes field ``field`` holding
        ``b"".join(pieces)`` (``ExecEvent(output=...)``, ``Chunk(data=...)``), framed with one
        copy of the pieces, never built and serialized."""
        prefix = bytes_field_prefix(field, size)
        await self._send_message([prefix, *pieces], len(prefix) + size)

    async def _send_message(self, parts: list[bytes | memoryview], size: int) -> None:
        """Send the ``size``-byte message ``b"".join(parts)`` (refused above the frame limit)."""
        if size >= self.frames.max_frame_size:
            raise TooLarge("reply", None, f"a {size}-byte message exceeds the frame limit")
        self._write(self.frames.send_message(parts))
        await self.carrier.drain()

    # -- one call --

    async def _run_call(
        self, method_name: str, first: bytes, inbound: asyncio.Queue[bytes | None]
    ) -> None:
        method = METHODS.get(method_name)
        op = method.op if method is not None else method_name
        error: OpsError | None = None
        started = time.perf_counter()
        call: _FrameCall | None = None
        outcome = "ok"
        try:
            if method is None:
                raise InvalidArgument(op, None, f"unknown method {method_name!r}")
            if method.client_streaming:  # the request frame carries the stream's first message
                call = _FrameCall(self, method, inbound, first)
                request = None
            else:
                call = _FrameCall(self, method, inbound, None)
                request = decode(method.request, first, op)
                call.subject = call_subject(request, call.ops)
            await method.handler(self.service, request, call)
        except OpsError as exc:
            error = exc
        except asyncio.CancelledError:
            outcome = "cancelled"
            task = asyncio.current_task()
            if not self._cancel_requested or task is None:
                raise
            task.uncancel()
            error = Aborted(op, None, "cancelled by the client")
        except (BrokenPipeError, ConnectionError):
            outcome = "disconnected"
            return
        except Exception:
            self._log.exception("opsbroker frames: %s failed", method_name)
            error = OpsError(op, None, "internal broker error (see the broker's log)")
            outcome = "internal"
        finally:
            self.task = None
            if error is not None and outcome == "ok":
                outcome = error.code
            subject = None if call is None else call.subject
            log_call(self._log, self.principal, op, subject, outcome, started)
        if self.carrier.is_closing():
            return
        detail = b"" if error is None else error_to_wire(error).SerializeToString()
        self._write([self.frames.send(End(detail))])
        self._maybe_next_call()
        if self.frames.closed_by_peer or self.closing:
            self._flush()
            self.carrier.close()


class _FrameSend:
    """A framed call's ``send``: messages, and command output and file pieces as raw bytes
    (:class:`~._output.OutputSend`, :class:`~._service.ChunkSend`)."""

    __slots__ = ("_server",)

    def __init__(self, server: FrameServer) -> None:
        self._server = server

    def __call__(self, message: ProtoMessage) -> Coroutine[object, object, None]:
        return self._server.send(message)

    def output(self, pieces: list[Piece], size: int) -> Coroutine[object, object, None]:
        return self._server.send_bytes_field(OUTPUT_FIELD, pieces, size)

    def chunk(self, data: bytes) -> Coroutine[object, object, None]:
        return self._server.send_bytes_field(CHUNK_FIELD, [data], len(data))


class _FrameCall:
    """The :class:`~._service.Call` of one framed call."""

    __slots__ = ("_first", "_inbound", "_method", "_server", "ops", "principal", "send", "subject")

    def __init__(
        self,
        server: FrameServer,
        method: Method,
        inbound: asyncio.Queue[bytes | None],
        first: bytes | None,
    ) -> None:
        self._server = server
        self._method = method
        self._inbound = inbound
        self._first = first
        self.ops: Backend = server.ops
        self.principal = server.principal
        self.subject: str | None = None
        self.send = _FrameSend(server)

    async def receive(self) -> ProtoMessage | None:
        data, self._first = self._first, None
        if data is None:
            data = await self._server.receive(self._inbound)
        if data is None:
            return None
        return decode(self._method.request, data, self._method.op)

    async def discard_input(self) -> None:
        return None  # the client sees END whenever it comes; nothing to wait for
