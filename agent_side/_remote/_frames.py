"""Framed calls on pooled streams: the client half of :mod:`opsbroker.v1.sshframe`.

A :class:`FrameClient` runs each call on a stream of its own (an SSH subsystem channel, a gRPC
``Frames`` call) taken from a small pool, and hands the stream back when the call is over, so the
next call costs one message pair instead of a new channel or RPC. What carries the bytes is a
:class:`FrameStream`; everything else (the calls, their cancellation, ``exec`` with its abort and
its deadline) is here, once for every transport.

**Cancellation:** cancelling the awaiting task (or closing a stream's iterator early) sends a
``CANCEL`` frame and waits, at most ``grace`` seconds, for the broker to end the call (for
``exec``: after the tree is killed); a broker that does not confirm in time has its stream cut.
An ``AbortSignal`` aborts an ``exec`` through ``AbortRun`` on another stream: the command is
killed and ``exec`` returns its result with ``kill_reason=ABORTED`` (after ``grace`` seconds
without the broker's word, ``ABORTED`` all the same, and the stream is cut).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final, TypeVar

from google.protobuf.message import Message as ProtoMessage
from opsbroker.v1 import broker_pb2 as pb
from opsbroker.v1.codec import error_from_wire, exit_from_wire
from opsbroker.v1.sshframe import (
    NEED_DATA,
    Cancel,
    End,
    EndOfInput,
    Event,
    FrameConnection,
    Message,
    ProtocolError,
    Request,
    Role,
    State,
    bytes_field_offset,
)

from operations import AbortSignal, ExecResult, KillReason, OnData, OpsError, Unavailable

from .processes import OPS

__all__ = ["MAX_IDLE_STREAMS", "METHOD_OPS", "FrameCall", "FrameClient", "FrameStream"]

M = TypeVar("M", bound=ProtoMessage)

MAX_IDLE_STREAMS: Final = 16
"""Streams kept open for reuse; more concurrent calls open more, and close them afterwards."""

_OUTPUT_FIELD: Final = pb.ExecEvent.DESCRIPTOR.fields_by_name["output"].number

METHOD_OPS: Final[dict[str, str]] = {
    "Capabilities": "connect",
    "ReadFile": "read_file",
    "ReadSmallFile": "read_file",
    "Access": "access",
    "DetectImageMimeType": "detect_image_mime_type",
    "WriteFile": "write_file",
    "WriteSmallFile": "write_file",
    "Mkdir": "mkdir",
    "Exists": "exists",
    "Stat": "stat",
    "Lstat": "lstat",
    "IsDirectory": "is_directory",
    "Readdir": "readdir",
    "ListDir": "list_dir",
    "Remove": "remove",
    "Rename": "rename",
    "Glob": "glob",
    "Search": "search",
    "Run": "exec",
    "AbortRun": "abort_exec",
    **OPS,
}
"""The operation each method serves, as errors name it."""


class FrameStream:
    """One stream of frames: what arrives becomes events; a transport subclass moves bytes."""

    what = "stream"
    """How errors name this kind of stream ("SSH channel", "gRPC Frames stream")."""

    def __init__(self, max_frame_size: int) -> None:
        self.frames = FrameConnection(Role.CLIENT, max_frame_size=max_frame_size)
        self.events: asyncio.Queue[Event | BaseException] = asyncio.Queue()
        self.writable = asyncio.Event()
        self.writable.set()
        self.broken = False
        self.prefix = b""  # frames to send before the next request (a deferred END_OF_INPUT)

    def received(self, data: bytes | memoryview) -> None:
        """Feed bytes from the broker; each complete frame becomes an event."""
        self.frames.receive_data(data)
        while True:
            try:
                event = self.frames.next_event()
            except ProtocolError as exc:
                self.fail(exc)
                return
            if event is NEED_DATA:
                return
            assert isinstance(event, Event)
            self.events.put_nowait(event)

    def fail(self, exc: BaseException) -> None:
        """The stream is unusable: the waiting call sees ``exc``; the stream is never reused."""
        if not self.broken:
            self.broken = True
            self.events.put_nowait(exc)

    def error(self, exc: BaseException, op: str, path: str | None) -> OpsError:
        """The error a call sees when the stream fails with ``exc``."""
        if isinstance(exc, OpsError):
            return exc
        return Unavailable(op, path, f"{self.what} to the broker lost: {exc}")

    def writelines(self, parts: list[bytes | memoryview]) -> None:
        """Send ``b"".join(parts)``, in order, without blocking (the transport's part, which
        joins them once; the bytes the views are of never change)."""
        raise NotImplementedError

    def close(self) -> None:
        """Close the stream; the broker cancels a call still running on it (the transport's
        part)."""
        raise NotImplementedError


class FrameCall:
    """One call on one stream: send request messages, receive response messages, see its end."""

    def __init__(self, stream: FrameStream, op: str, path: str | None, grace: float) -> None:
        self.stream = stream
        self.op = op
        self.path = path
        self.grace = grace
        self.ended = False
        self.gave_up = False  # an abort the broker did not confirm in time cut the stream
        self.failure: BaseException | None = None  # why the stream failed under the call

    async def send(self, message: ProtoMessage) -> None:
        await self.send_message([message.SerializeToString()])

    async def send_message(self, parts: list[bytes | memoryview]) -> None:
        """Send the serialized message ``b"".join(parts)``, framed without copying it (the
        transport joins the frame's parts, once)."""
        stream = self.stream
        if stream.broken:
            raise Unavailable(self.op, self.path, f"{stream.what} to the broker lost")
        stream.writelines(stream.frames.send_message(parts))
        await stream.writable.wait()

    def end_input(self) -> None:
        stream = self.stream
        if not stream.broken and stream.frames.our_state is State.SEND:
            stream.writelines([stream.frames.send(EndOfInput())])

    async def receive(self) -> bytes | None:
        """The next response message; ``None`` once the call ended well.

        Raises:
            OpsError: the call ended with an error (the broker's, rebuilt), or the stream died.
        """
        if self.ended:
            return None
        event = await self.stream.events.get()
        if isinstance(event, BaseException):
            self.ended = True
            self.failure = event
            raise self.stream.error(event, self.op, self.path)
        if isinstance(event, Message):
            return event.message
        assert isinstance(event, End)
        self.ended = True
        if event.ok:
            return None
        detail = pb.ErrorDetail()
        detail.ParseFromString(event.error)
        raise error_from_wire(detail)

    async def receive_one(self, cls: type[M]) -> M:
        data = await self.receive()
        if data is None:
            raise Unavailable(self.op, self.path, "the broker sent no reply")
        message = cls()
        message.ParseFromString(data)
        while await self.receive() is not None:
            pass
        return message

    async def cancel(self, reason: str) -> None:
        """Ask the broker to stop the call and wait, at most ``grace`` seconds, until it says it
        has; a broker that does not answer in time has the stream cut."""
        stream = self.stream
        if self.ended or stream.broken:
            return
        stream.writelines([stream.frames.send(Cancel(reason))])
        try:
            async with asyncio.timeout(self.grace):
                while not self.ended:
                    with contextlib.suppress(OpsError):
                        await self.receive()
        except TimeoutError:
            stream.close()


class FrameClient:
    """Calls of the one service table, framed on streams ``open_stream`` opens.

    Args:
        open_stream: opens a new stream for a call to ``op`` on ``path`` (raises ``OpsError``).
        grace: how long a cancelled or aborted call waits for the broker to confirm, and how
            long past an ``exec``'s timeout the broker may take to report.
    """

    def __init__(
        self, open_stream: Callable[[str, str | None], Awaitable[FrameStream]], grace: float
    ) -> None:
        self._open = open_stream
        self.grace = grace
        self._idle: list[FrameStream] = []
        self._aborts: set[asyncio.Task[None]] = set()  # AbortRun calls on their way
        self.closed = False

    def close(self) -> None:
        """Forget the idle streams (their transport closes them) and stop pending aborts."""
        self.closed = True
        idle, self._idle = self._idle, []
        for stream in idle:
            stream.close()
        for task in list(self._aborts):
            task.cancel()

    async def _stream(self, op: str, path: str | None) -> FrameStream:
        while self._idle:
            stream = self._idle.pop()
            if not stream.broken:
                return stream
        return await self._open(op, path)

    def _release(self, stream: FrameStream) -> None:
        frames = stream.frames
        reusable = (
            not stream.broken
            and not self.closed
            and frames.their_state is State.DONE
            and len(self._idle) < MAX_IDLE_STREAMS
        )
        if reusable and frames.our_state is State.SEND:
            # The call ended while we could still send (exec): finish our half with the next
            # request on this stream, in the same packet, instead of one packet of its own.
            stream.prefix = frames.send(EndOfInput())
        if reusable and frames.our_state is State.DONE and frames.their_state is State.DONE:
            frames.start_next_call()
            self._idle.append(stream)
        else:
            stream.close()

    @contextlib.asynccontextmanager
    async def call(
        self, method: str, request: ProtoMessage, path: str | None, *, streaming_input: bool = False
    ) -> AsyncIterator[FrameCall]:
        """One call to ``method``: its first request sent, the call yielded to read (and, with
        ``streaming_input``, to send more); cancelled on the broker if left before its end."""
        op = METHOD_OPS[method]
        stream = await self._stream(op, path)
        call = FrameCall(stream, op, path, self.grace)
        data = stream.prefix + stream.frames.send(Request(method, request.SerializeToString()))
        stream.prefix = b""
        if not streaming_input:
            data += stream.frames.send(EndOfInput())
        stream.writelines([data])
        abandoned = False
        try:
            yield call
        except BaseException as exc:
            if not call.ended:
                abandoned = isinstance(exc, GeneratorExit)
                try:
                    await call.cancel(f"client {type(exc).__name__}")
                except BaseException:
                    stream.close()
                    raise
            raise
        finally:
            if abandoned:
                # A stream closed early by its consumer (a search stopped at its limit) is
                # finalised outside the call's task, racing the next call for this stream:
                # the stream is closed, never handed on.
                stream.close()
            else:
                self._release(stream)

    async def unary(
        self, method: str, request: ProtoMessage, reply: type[M], path: str | None = None
    ) -> M:
        async with self.call(method, request, path) as call:
            return await call.receive_one(reply)

    async def stream(
        self, method: str, request: ProtoMessage, path: str | None
    ) -> AsyncIterator[bytes]:
        async with self.call(method, request, path) as call:
            while (data := await call.receive()) is not None:
                yield data

    # -- exec --

    async def exec(
        self, start: pb.ExecRequest, on_data: OnData, signal: AbortSignal | None
    ) -> ExecResult:
        """Run ``start`` (an ``ExecRequest`` with an ``abort_id``): output to ``on_data``, the
        exit returned; ``signal`` aborts it through ``AbortRun``."""
        cwd = start.cwd
        timeout = start.timeout if start.HasField("timeout") else None
        result: ExecResult | None = None
        loop = asyncio.get_running_loop()
        # The broker must report within the timeout plus the grace; the time on_data takes is
        # the consumer's, and moves the deadline on (what the broker sent is still delivered).
        deadline = None if timeout is None else loop.time() + timeout + self.grace
        async with self.call("Run", start, cwd) as call:
            remove = self._on_abort(signal, start.abort_id, call)
            try:
                while True:
                    async with asyncio.timeout_at(deadline):
                        data = await call.receive()
                    if data is None:
                        break
                    offset = bytes_field_offset(data, _OUTPUT_FIELD)
                    if offset is not None:  # ExecEvent(output=...): taken without parsing
                        output = data[offset:]
                    else:
                        event = pb.ExecEvent()
                        event.ParseFromString(data)
                        kind = event.WhichOneof("event")
                        if kind == "exit":
                            result = exit_from_wire(event.exit)
                        if kind != "output":
                            continue
                        output = event.output
                    handed = loop.time()
                    pending = on_data(output)
                    if inspect.isawaitable(pending):
                        await pending
                    if deadline is not None:
                        deadline += loop.time() - handed
            except TimeoutError:
                call.stream.close()
                raise Unavailable(
                    "exec",
                    cwd,
                    f"the broker did not report within the {timeout} s timeout plus {self.grace} s",
                ) from None
            except OpsError:
                if call.gave_up:  # the broker did not confirm the abort in time
                    return ExecResult(None, KillReason.ABORTED)
                raise
            finally:
                remove()
        if result is None:
            raise Unavailable("exec", cwd, "the broker ended the command without an exit status")
        return result

    def _on_abort(
        self, signal: AbortSignal | None, abort_id: str, call: FrameCall
    ) -> Callable[[], None]:
        """Send ``AbortRun(abort_id)`` when ``signal`` aborts, and give the broker ``grace``
        seconds to end ``call``; returns the un-listen function. A failed AbortRun is ignored:
        the grace still bounds the wait."""
        if signal is None:
            return lambda: None
        loop = asyncio.get_running_loop()
        request = pb.AbortRunRequest(abort_id=abort_id)
        timers: list[asyncio.TimerHandle] = []

        async def send() -> None:
            with contextlib.suppress(OpsError):
                await self.unary("AbortRun", request, pb.Empty)

        def give_up() -> None:
            if not call.ended:
                call.gave_up = True
                call.stream.fail(ConnectionAbortedError("the broker did not confirm the abort"))
                call.stream.close()

        def start() -> None:
            if timers or call.ended:
                return
            task = loop.create_task(send())
            self._aborts.add(task)
            task.add_done_callback(self._aborts.discard)
            timers.append(loop.call_later(self.grace, give_up))

        def listener() -> None:
            loop.call_soon_threadsafe(start)

        remove = signal.add_listener(listener)

        def unlisten() -> None:
            remove()
            for timer in timers:
                timer.cancel()

        return unlisten
