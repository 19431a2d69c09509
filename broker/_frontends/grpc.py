"""The gRPC front-end: the ``opsbroker.v1.Broker`` service over any ``operations.Backend``.

A translation and nothing more: each method hands its request to the one service table
(``_service.METHODS``) with a :class:`~._service.Call` over the gRPC context, inside one
:class:`~._grpcwire.CallScope` that logs the call and turns an :class:`~operations.OpsError` into a
status code plus an ``ErrorDetail`` in the trailing metadata (``_grpcwire.STATUS`` is the one
mapping). Who may call is decided before any method runs (``_grpcauth``: every method of every
service, health and reflection included, is wrapped as it is registered), so a refused call
performs nothing. Each call then runs on the backend behind the broker's policy and audit, as its
principal.

**Cancellation:** a client that cancels, passes its deadline or disappears gets its handler task
cancelled by grpc.aio; the backend call is cancelled with it (``exec`` kills the command tree
through the backend's one kill path). :meth:`BrokerServicer.kill_running` aborts every running
command at shutdown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import Message as ProtoMessage
from opsbroker.v1 import broker_pb2_grpc as pb_grpc
from opsbroker.v1.sshframe import DEFAULT_MAX_FRAME_SIZE, bytes_field_message

from operations import Backend, InvalidArgument

from .._guard import Enforcement
from ._frames import FrameServer
from ._grpcauth import AuthenticatedServer, Authenticator
from ._grpcframes import StreamCarrier
from ._grpcwire import SERVICE_NAME, CallScope, Undecodable, current_principal, log
from ._output import OUTPUT_FIELD, Piece
from ._service import CHUNK_FIELD, METHODS, Method, Service, call_subject, capabilities_of

__all__ = [
    "SERVICE_NAME",
    "AuthenticatedServer",
    "Authenticator",
    "BrokerServicer",
]

Context = grpc.aio.ServicerContext[Any, Any]


class _GrpcCall:
    """What a gRPC call's :class:`~._service.Call` has whatever its replies."""

    __slots__ = ("_context", "_op", "ops", "principal", "subject")

    def __init__(
        self, context: Context, op: str, ops: Backend, principal: str, request: object = None
    ) -> None:
        self._context = context
        self._op = op
        self.ops = ops
        self.principal = principal
        self.subject = call_subject(request, ops)

    async def receive(self) -> ProtoMessage | None:
        message = await self._context.read()
        if message is grpc.aio.EOF:
            return None
        if isinstance(message, Undecodable):
            raise message.error(self._op)
        assert isinstance(message, ProtoMessage)
        return message

    async def discard_input(self) -> None:
        """Read and drop what the client still sends: a client whose write meets an already
        finished call sees grpc's "internal error", not the broker's status."""
        try:
            while await self._context.read() is not grpc.aio.EOF:
                pass
        except Exception:  # the call is over either way; the caller reports the first error
            return


class _StreamCall(_GrpcCall):
    """The :class:`~._service.Call` of one gRPC call whose replies are a stream."""

    __slots__ = ("send",)

    def __init__(
        self, context: Context, op: str, ops: Backend, principal: str, request: object = None
    ) -> None:
        super().__init__(context, op, ops, principal, request)
        self.send = _StreamSend(context)


class _StreamSend:
    """A reply stream's ``send``: messages, and command output and file pieces written as the
    serialized ``ExecEvent`` and ``Chunk`` (:class:`~._output.OutputSend`,
    :class:`~._service.ChunkSend`) in one copy, never built and serialized (two copies more;
    the method's serializer passes them as they are: ``opsbroker.v1.codec.passing_bytes``)."""

    __slots__ = ("_write",)

    def __init__(self, context: Context) -> None:
        self._write = context.write

    def __call__(self, message: ProtoMessage) -> Coroutine[Any, Any, None]:
        return self._write(message)

    def output(self, pieces: list[Piece], size: int) -> Coroutine[Any, Any, None]:
        return self._write(bytes_field_message(OUTPUT_FIELD, pieces))

    def chunk(self, data: bytes) -> Coroutine[Any, Any, None]:
        return self._write(bytes_field_message(CHUNK_FIELD, [data]))


class _UnaryCall(_GrpcCall):
    """The :class:`~._service.Call` of one gRPC call with a single reply, returned at the end."""

    __slots__ = ("reply",)

    def __init__(
        self, context: Context, op: str, ops: Backend, principal: str, request: object = None
    ) -> None:
        super().__init__(context, op, ops, principal, request)
        self.reply: ProtoMessage | None = None

    async def send(self, message: ProtoMessage) -> None:
        if self.reply is not None:
            raise InvalidArgument(self._op, None, "a unary call has one reply")
        self.reply = message


class BrokerServicer(pb_grpc.BrokerServicer):
    """``opsbroker.v1.Broker`` over ``backend``: every method is ``_service.METHODS``'s handler.

    Args:
        backend: what does the work (the broker core, or any ``operations.Backend``).
        version: reported by ``Capabilities``.
        info: extra ``Capabilities`` facts the backend knows; by default read from
            ``backend.capabilities()`` when the backend has that method.
        enforcement: the broker's policy and audit; each call runs behind it as its principal.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        version: str,
        info: Mapping[str, Any] | None = None,
        enforcement: Enforcement | None = None,
    ) -> None:
        self._backend = backend
        self._enforcement = enforcement
        if info is None:
            info = capabilities_of(backend, enforcement)
        self.service = Service(version=version, root=backend.root, info=info)
        self._sessions: set[FrameServer] = set()
        self._frame_calls: set[asyncio.Task[None]] = set()

    def _ops(self, context: Context, principal: str) -> Backend:
        """The backend this call uses: the core behind the broker's policy and audit, as the
        caller's principal."""
        if self._enforcement is None:
            return self._backend
        return self._enforcement.guard(
            self._backend, principal=principal, transport="grpc", peer=context.peer() or ""
        )

    async def Frames(self, requests: object, context: Context) -> None:
        """Framed calls on one long-lived stream (:mod:`._grpcframes`), as the stream's
        principal; the stream ends when the client ends it, or at broker shutdown once no call
        runs on it."""
        principal = current_principal.get()
        carrier = StreamCarrier(context)
        session = FrameServer(
            carrier,
            self.service,
            self._ops(context, principal),
            principal,
            max_frame_size=DEFAULT_MAX_FRAME_SIZE,
            calls=self._frame_calls,
            log=log,
        )
        self._sessions.add(session)
        reader = asyncio.ensure_future(_read_frames(carrier, session))
        try:
            await carrier.closed.wait()
            await carrier.writer
            if session.protocol_error is not None:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Frames: {session.protocol_error} (see opsbroker.v1.sshframe)",
                )
        finally:
            self._sessions.discard(session)
            reader.cancel()
            carrier.writer.cancel()
            session.lost()

    def close_sessions(self) -> None:
        """End every ``Frames`` stream once no call runs on it (broker shutdown)."""
        for session in list(self._sessions):
            session.close_when_idle()

    def kill_running(self) -> int:
        """Abort every running command (broker shutdown); their callers see ``SHUTDOWN``."""
        return self.service.kill_running()

    async def drain(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) for cleanups, and framed calls, that outlived
        their calls and streams."""
        if self._frame_calls:
            await asyncio.wait(set(self._frame_calls), timeout=timeout)
        await self.service.drain(timeout)

    @property
    def running(self) -> int:
        """How many commands are running now."""
        return self.service.running


async def _read_frames(carrier: StreamCarrier, session: FrameServer) -> None:
    """Feed what the client sends to ``session`` until its end of input (or a broken read)."""
    try:
        while (data := await carrier.read()) is not None:
            if carrier.is_closing():
                return  # what comes after a protocol error, or after shutdown, is not read
            session.data(data)
    except (ValueError, grpc.aio.AioRpcError, asyncio.InvalidStateError) as exc:
        if isinstance(exc, ValueError):  # not FrameBytes: answered INVALID_ARGUMENT
            session.protocol_error = str(exc)
        else:
            log.info("Frames stream: %s; closing it", exc)
        session.lost()
        carrier.close()
        return
    session.eof()


def _translate(method: Method) -> Callable[..., Any]:
    """The servicer method for ``method``: wire in, the service's handler, wire out."""
    handler, op = method.handler, method.op

    if method.client_streaming:

        async def upload(self: BrokerServicer, requests: object, context: Context) -> Any:
            principal = current_principal.get()
            call = _UnaryCall(context, op, self._ops(context, principal), principal)
            async with CallScope(context, op, call):
                await handler(self.service, None, call)
                return call.reply

        return upload

    if method.server_streaming:

        async def stream(self: BrokerServicer, request: Any, context: Context) -> None:
            principal = current_principal.get()
            call = _StreamCall(context, op, self._ops(context, principal), principal, request)
            async with CallScope(context, op, call):
                await handler(self.service, request, call)

        return stream

    async def unary(self: BrokerServicer, request: Any, context: Context) -> Any:
        principal = current_principal.get()
        call = _UnaryCall(context, op, self._ops(context, principal), principal, request)
        async with CallScope(context, op, call):
            await handler(self.service, request, call)
            return call.reply

    return unary


for _method in METHODS.values():
    setattr(BrokerServicer, _method.name, _translate(_method))
