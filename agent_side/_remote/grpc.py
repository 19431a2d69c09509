"""The gRPC client backend: every Operations interface, carried to a broker over gRPC.

``agent_side.connect("grpc://host:port", token=...)`` returns a :class:`GrpcBackend`. It opens its
channel lazily, inside the running event loop: ``async with connect(url) as ops`` (or
``await ops.open()``) connects and fetches the broker's capabilities, ``root`` among them; any
operation called first opens it too. ``ops.root`` before that raises
:class:`~operations.Unavailable`.

Errors come back as the ``operations`` type the broker raised (op, path, reason, rule). Calls that
only read are retried when the broker was unreachable, if it answers again within
``reconnect_wait`` seconds; calls that change something are never retried. A broker that dies
(its connection closes) fails a call with :class:`~operations.Unavailable` within
``reconnect_wait``, not ``call_timeout``; one that stops answering (a frozen process, a host
gone) is noticed by keepalive pings within ``KEEPALIVE_TIME_MS + KEEPALIVE_TIMEOUT_MS``.

Calls run on the broker's ``Frames`` stream, as over SSH (:class:`~._frames.FrameClient`): a
few long-lived streams are kept open and each carries one call at a time, so a call costs a
message pair instead of a new RPC (its headers, its handler task, its status). Only the first
contact (``Capabilities``), the streams of files larger than one chunk (``ReadFile``,
``WriteFile``) and the calls on processes that outlive a call are RPCs of their own.

**Cancellation:** cancelling the awaiting task cancels the call (an RPC, or ``CANCEL`` on its
``Frames`` stream, confirmed within ``exec_grace`` seconds or the stream is cut), and the broker
stops the work. For ``exec``, cancelling the task (or aborting its signal) first asks the broker
to kill the tree and waits, at most ``exec_grace`` seconds, until it has, exactly like a local
``exec``; a broker
that has not reported ``exec_grace`` seconds after the command's timeout is given up on.
"""

from __future__ import annotations

import asyncio
import functools
import io
import os
import urllib.parse
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Iterator,
    Mapping,
    Sequence,
)
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self, TypeVar

import grpc
import grpc.aio
from google.protobuf.message import Message as ProtoMessage
from opsbroker import malloc
from opsbroker.v1 import broker_pb2 as pb
from opsbroker.v1 import broker_pb2_grpc as pb_grpc
from opsbroker.v1.codec import (
    CHUNK_BYTES,
    ERROR_METADATA_KEY,
    MAX_MESSAGE_BYTES,
    capabilities_from_wire,
    chunk_data_view,
    error_from_wire,
    kind_from_wire,
    passing_bytes,
    stat_from_wire,
)
from opsbroker.v1.sshframe import DEFAULT_MAX_FRAME_SIZE, bytes_field_message

from operations import (
    Aborted,
    AbortSignal,
    DirEntry,
    ExecResult,
    FileStat,
    InvalidArgument,
    KillReason,
    NotFound,
    OnData,
    OpsError,
    PermissionDenied,
    SearchMatch,
    ShellExec,
    Timeout,
    TooLarge,
    Unauthenticated,
    Unavailable,
    check_mode,
)

from ._frames import FrameCall, FrameClient, FrameStream
from .processes import OPS, RemoteProcesses

__all__ = ["CALL_TIMEOUT", "EXEC_GRACE", "GrpcBackend", "open_from_url"]

CALL_TIMEOUT = 300.0  # seconds for any call but exec: a dead broker cannot hang a tool forever
EXEC_GRACE = 10.0  # seconds beyond an exec's own timeout before the client gives up on the broker
RECONNECT_ATTEMPTS = 3  # tries of a read-only call while the broker is unreachable
RECONNECT_WAIT = 5.0  # seconds a read-only call waits for an unreachable broker to come back
KEEPALIVE_TIME_MS = 10_000  # ping the broker during calls, so a frozen or vanished one is noticed
KEEPALIVE_TIMEOUT_MS = 5_000  # ...and fail its calls if a ping is not answered in this time
RECONNECT_BACKOFF_MS = (250, 1_000)  # first and longest pause between reconnect attempts
# (grpc.min_reconnect_backoff_ms is gRPC's minimum *connect timeout*, 20 s: left alone, so a
# slow TLS handshake over a long path is not cut.)

_FROM_STATUS: dict[grpc.StatusCode, type[OpsError]] = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: TooLarge,
    grpc.StatusCode.DEADLINE_EXCEEDED: Timeout,
    grpc.StatusCode.CANCELLED: Aborted,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
}


M = TypeVar("M")

_BROKER: Final = pb.DESCRIPTOR.services_by_name["Broker"]

_REPLIES: dict[str, type[ProtoMessage]] = {
    method.name: getattr(pb, method.output_type.name) for method in _BROKER.methods
}
"""The reply message of each method, by name."""


def _error(exc: grpc.aio.AioRpcError, op: str, path: str | None) -> OpsError:
    """The ``operations`` error an RPC failure stands for (the broker's own, when it sent one)."""
    for key, value in exc.trailing_metadata() or ():
        if key == ERROR_METADATA_KEY and isinstance(value, bytes):
            try:
                return error_from_wire(pb.ErrorDetail.FromString(value))
            except Exception:
                break
    code = exc.code()
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED and _CALL_LIMIT in (exc.details() or ""):
        return Unavailable(
            op,
            path,
            "the broker runs as many calls as it takes (its max_concurrent_calls); "
            "retry once one has ended (gRPC RESOURCE_EXHAUSTED)",
        )
    cls = _FROM_STATUS.get(code, OpsError)
    return cls(op, path, f"{exc.details() or 'call failed'} (gRPC {code.name})")


_CALL_LIMIT = "Concurrent RPC limit exceeded"
"""grpc's answer past a server's ``maximum_concurrent_rpcs``: ``RESOURCE_EXHAUSTED``, the code
of a message over the size limit too, which stays ``TooLarge``."""


_REFUSED = "Connection refused"
_NO_CLIENT_CERTIFICATE = (  # what the TLS stack says when a broker wants a client certificate
    "CERTIFICATE_REQUIRED",
    "certificate required",
    "PEER_DID_NOT_RETURN_A_CERTIFICATE",
    "Socket closed",
    "handshake",
)


def _connect_failure(
    details: str, target: str, credentials: grpc.ChannelCredentials | None
) -> OpsError | None:
    """The error for a first call that failed in a way no retry cures, or ``None``."""
    if _REFUSED in details:
        return Unavailable(
            "connect",
            target,
            "nothing listens there (connection refused); start the broker with "
            "'opsbroker serve' or check the address",
        )
    if credentials is not None and any(
        m.lower() in details.lower() for m in _NO_CLIENT_CERTIFICATE
    ):
        return Unauthenticated(
            "connect",
            target,
            f"the broker refused the TLS handshake ({details.rsplit(': ', 1)[-1]}): it requires "
            "a client certificate its CA signed; give client_cert and client_key",
        )
    return None


class GrpcBackend:
    """An ``operations.Backend`` whose work happens on a broker reached over gRPC.

    Args:
        target: a gRPC target, ``host:port`` or ``unix:/path.sock``.
        token: the bearer token (``None`` for Unix sockets and mutual TLS).
        credentials: TLS channel credentials (``grpcs``), or ``None`` for plaintext.
        call_timeout: deadline of every call but ``exec``, in seconds.
        exec_grace: how long past an exec's timeout (or an abort) to wait for the broker.
        reconnect_wait: how long a read-only call waits for an unreachable broker to answer.
        tune_allocator: set glibc's allocator thresholds for large transfers when connecting
            (:func:`opsbroker.malloc.tune_allocator`), as the SSH backend's option of that name.
            Off by default: the setting is process-wide, the embedding application's to make;
            on, 64 MiB of command output cost this client a quarter less CPU here.
        options: extra gRPC channel options.
    """

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        call_timeout: float = CALL_TIMEOUT,
        exec_grace: float = EXEC_GRACE,
        reconnect_wait: float = RECONNECT_WAIT,
        tune_allocator: bool = False,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        self.target = target
        self._tune_allocator = tune_allocator
        # One Metadata for every call: grpc takes it as it is (a tuple is converted per call).
        self._metadata = grpc.aio.Metadata(
            *((("authorization", f"Bearer {token}"),) if token else ())
        )
        self._credentials = credentials
        self._call_timeout = call_timeout
        self._exec_grace = exec_grace
        self._reconnect_wait = reconnect_wait
        self._options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
            ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
            ("grpc.http2.max_pings_without_data", 0),  # keep pinging through a silent exec
            ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[0]),
            ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[1]),
            *options,
        ]
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None
        self._read_stream: Any = None
        self._write_stream: Any = None
        self._frames_stream: Any = None
        self._capabilities: pb.CapabilitiesReply | None = None
        self._opening: asyncio.Lock | None = None
        self._closed = False
        self._powershell = ShellExec(functools.partial(self._exec, pb.SHELL_POWERSHELL))
        self._frames = FrameClient(self._frame_stream, exec_grace)

    # -- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> Self:
        """Connect and fetch the broker's capabilities (and ``root``). Idempotent.

        Raises:
            Unavailable: the broker cannot be reached, or this backend was closed.
            Unauthenticated: the broker refused the token or certificate.
        """
        await self._ensure()
        return self

    async def _ensure(self) -> Any:
        if self._stub is not None and self._capabilities is not None:
            return self._stub
        if self._closed:
            raise Unavailable(
                "connect", self.target, "the backend has been closed; connect() again"
            )
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._channel is None:
                if self._tune_allocator:
                    malloc.tune_allocator()
                if self._credentials is not None:
                    self._channel = grpc.aio.secure_channel(
                        self.target, self._credentials, options=self._options
                    )
                else:
                    self._channel = grpc.aio.insecure_channel(self.target, options=self._options)
                self._stub = pb_grpc.BrokerStub(self._channel)  # type: ignore[no-untyped-call]
                # ReadFile's chunks as views into the received messages: copied once, into
                # what the caller gets, instead of once more by the protobuf parser (or, on a
                # Frames stream, once more out of the frame bytes: 6-8% slower for 64 MiB).
                self._read_stream = self._channel.unary_stream(
                    f"/{_BROKER.full_name}/ReadFile",
                    request_serializer=pb.PathRequest.SerializeToString,
                    response_deserializer=chunk_data_view,
                )
                # WriteFile's messages serialized here, each piece copied once (_data_messages).
                self._write_stream = self._channel.stream_unary(
                    f"/{_BROKER.full_name}/WriteFile",
                    request_serializer=passing_bytes(pb.WriteFileRequest.SerializeToString),
                    response_deserializer=pb.Empty.FromString,
                )
                # Frames likewise: its replies as views, its requests serialized by _FramesCall.
                self._frames_stream = self._channel.stream_stream(
                    f"/{_BROKER.full_name}/Frames", response_deserializer=chunk_data_view
                )
            if self._capabilities is None:
                self._capabilities = await self._first_contact()
        return self._stub

    async def _first_contact(self) -> pb.CapabilitiesReply:
        """``Capabilities``, once at once: what no retry can cure (nothing listens, a TLS
        handshake refused) is said now; anything else gets the bounded wait of ``_unary``."""
        try:
            reply: pb.CapabilitiesReply = await self._stub.Capabilities(
                pb.CapabilitiesRequest(),
                timeout=self._call_timeout,
                metadata=self._metadata,
                wait_for_ready=False,
            )
            return reply
        except grpc.aio.AioRpcError as exc:
            if exc.code() is not grpc.StatusCode.UNAVAILABLE:
                raise _error(exc, "connect", self.target) from None
            hopeless = _connect_failure(exc.details() or "", self.target, self._credentials)
            if hopeless is not None:
                raise hopeless from None
        answer: pb.CapabilitiesReply = await self._unary(
            "connect", self.target, self._stub.Capabilities, pb.CapabilitiesRequest()
        )
        return answer

    def _reply(self) -> pb.CapabilitiesReply:
        if self._capabilities is None:
            raise Unavailable(
                "capabilities", self.target, "not connected yet; use `async with` or open()"
            )
        return self._capabilities

    def capabilities(self) -> dict[str, Any]:
        """What the broker reported at connect, in the shape of ``Broker.capabilities()``:
        resolver, search engine, tracking, sandbox, limits (``None``: no limit).

        Raises:
            Unavailable: not connected yet.
        """
        return capabilities_from_wire(self._reply())

    @property
    def version(self) -> str:
        """The broker's opsbroker version (known once connected)."""
        return self._reply().version

    @property
    def root(self) -> str:
        """The workspace root on the broker (known once connected)."""
        return self._reply().root

    @property
    def powershell(self) -> ShellExec:
        return self._powershell

    async def aclose(self) -> None:
        """Close the channel; calls still running are cancelled. Idempotent."""
        self._closed = True
        self._frames.close()
        channel, self._channel = self._channel, None
        self._stub = None
        if channel is not None:
            await channel.close()

    async def __aenter__(self) -> Self:
        try:
            return await self.open()
        except BaseException:
            await self.aclose()
            raise

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- call helpers --------------------------------------------------------------------------

    async def _unary(
        self,
        op: str,
        path: str | None,
        rpc: Any,
        request: Any,
        *,
        idempotent: bool = True,
        deadline: bool = True,
    ) -> Any:
        attempts = RECONNECT_ATTEMPTS if idempotent else 1
        give_up = asyncio.get_running_loop().time() + self._reconnect_wait
        for attempt in range(attempts):
            if attempt:
                await self._reconnected(op, path, give_up)
            try:
                # Never wait_for_ready: a broker that is down fails the call now, not at its
                # deadline; the bounded wait for a reconnect is _reconnected's.
                return await rpc(
                    request,
                    timeout=self._call_timeout if deadline else None,
                    metadata=self._metadata,
                    wait_for_ready=False,
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() is grpc.StatusCode.UNAVAILABLE and attempt + 1 < attempts:
                    continue
                raise _error(exc, op, path) from None
        raise AssertionError("unreachable")

    async def _stream(
        self,
        op: str,
        path: str | None,
        rpc: Any,
        request: Any,
        *,
        idempotent: bool = True,
        deadline: bool = True,
    ) -> AsyncIterator[Any]:
        """The replies of a server-streaming call. Retried only before its first reply."""
        attempts = RECONNECT_ATTEMPTS if idempotent else 1
        give_up = asyncio.get_running_loop().time() + self._reconnect_wait
        for attempt in range(attempts):
            if attempt:
                await self._reconnected(op, path, give_up)
            call = rpc(
                request,
                timeout=self._call_timeout if deadline else None,
                metadata=self._metadata,
                wait_for_ready=False,
            )
            started = False
            try:
                # read() rather than `async for`: the iterator costs an extra generator per call.
                while (reply := await call.read()) is not grpc.aio.EOF:
                    started = True
                    yield reply
                return
            except grpc.aio.AioRpcError as exc:
                if (
                    exc.code() is grpc.StatusCode.UNAVAILABLE
                    and not started
                    and attempt + 1 < attempts
                ):
                    continue
                raise _error(exc, op, path) from None
            finally:
                call.cancel()

    async def _reconnected(self, op: str, path: str | None, give_up: float) -> None:
        """Wait until the channel is connected again, or raise Unavailable at ``give_up``."""
        channel = self._channel
        if channel is None:
            raise Unavailable(op, path, "the backend has been closed; connect() again")
        try:
            async with asyncio.timeout_at(give_up):
                await channel.channel_ready()
        except TimeoutError:
            raise Unavailable(
                op,
                path,
                f"the broker at {self.target} does not answer (waited {self._reconnect_wait:g} s "
                "for it to come back); is it running?",
            ) from None

    @property
    def processes(self) -> RemoteProcesses:
        """Processes that outlive a call, kept by the broker (:class:`~operations.ProcessOperations`)."""
        return RemoteProcesses(self._process_call, self._process_stream)

    async def _process_call(
        self, method: str, request: Any, reply: type[M], path: str | None, *, long: bool = False
    ) -> M:
        stub = await self._ensure()
        op = OPS[method]
        answer: M = await self._unary(
            op, path, getattr(stub, method), request, idempotent=False, deadline=not long
        )
        return answer

    async def _process_stream(
        self, method: str, request: Any, reply: type[M], path: str | None
    ) -> AsyncIterator[M]:
        stub = await self._ensure()
        async for answer in self._stream(
            OPS[method], path, getattr(stub, method), request, idempotent=False, deadline=False
        ):
            yield answer

    async def _call(
        self, op: str, path: str | None, method: str, request: Any, *, idempotent: bool = True
    ) -> Any:
        """The one reply of ``method`` on a ``Frames`` stream (timed and retried as
        :meth:`_replies` says)."""
        replies = [
            data async for data in self._replies(op, path, method, request, idempotent=idempotent)
        ]
        if not replies:
            raise Unavailable(op, path, "the broker sent no reply")
        return _REPLIES[method].FromString(replies[0])

    async def _change(self, op: str, path: str | None, method: str, request: Any) -> Any:
        return await self._call(op, path, method, request, idempotent=False)

    async def _messages(
        self, op: str, path: str | None, method: str, request: Any, *, idempotent: bool = True
    ) -> AsyncIterator[Any]:
        parse = _REPLIES[method].FromString
        async for data in self._replies(op, path, method, request, idempotent=idempotent):
            yield parse(data)

    async def _replies(
        self, op: str, path: str | None, method: str, request: Any, *, idempotent: bool = True
    ) -> AsyncIterator[bytes]:
        """The serialized replies of ``method`` on a ``Frames`` stream, all of them within
        ``call_timeout`` (the time the caller spends between them aside). With ``idempotent``,
        a call whose stream found the broker unreachable before any reply is tried again once
        it answers, for at most ``reconnect_wait`` seconds, as an RPC would be."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._call_timeout
        attempts = RECONNECT_ATTEMPTS if idempotent else 1
        give_up = loop.time() + self._reconnect_wait
        for attempt in range(attempts):
            if attempt:
                await self._reconnected(op, path, give_up)
            call: FrameCall | None = None
            started = False
            try:
                async with self._frames.call(method, request, path) as call:
                    while (data := await self._receive(call, deadline)) is not None:
                        started = True
                        yield data
                return
            except Unavailable:
                if started or attempt + 1 == attempts or not _unreachable(call):
                    raise

    async def _receive(self, call: FrameCall, deadline: float) -> bytes | None:
        try:
            async with asyncio.timeout_at(deadline):
                return await call.receive()
        except TimeoutError:
            raise self._timeout(call.op, call.path) from None

    def _timeout(self, op: str, path: str | None) -> Timeout:
        return Timeout(
            op, path, f"the broker did not finish within {self._call_timeout:g} s (call_timeout)"
        )

    # -- ReadOperations / WriteOperations ------------------------------------------------------

    async def read_file(self, path: str) -> bytes:
        _check("read_file", path)
        # Most files fit in one chunk: one unary call. A larger one is streamed (the broker
        # read nothing for the first call, so the stream is the one consistent read).
        small = await self._call("read_file", path, "ReadSmallFile", _p(path))
        if small.complete:
            return small.data  # type: ignore[no-any-return]
        await self._ensure()
        # Each piece is copied once, into the buffer whose bytes are returned (getvalue() hands
        # them over without another copy); received messages are released as they come.
        content = io.BytesIO()
        async for piece in self._stream("read_file", path, self._read_stream, _p(path)):
            content.write(piece)
        return content.getvalue()

    async def read_chunks(
        self, path: str, *, chunk_size: int = CHUNK_BYTES
    ) -> AsyncIterator[bytes]:
        """``read_file`` in pieces of at most ``chunk_size`` bytes, never holding the whole file.

        An optional extension beyond the Operations protocols
        (:class:`~operations.ChunkedFileOperations`); errors are those of ``read_file``.
        """
        _check("read_file", path)
        if chunk_size < 1:
            raise InvalidArgument("read_file", path, f"chunk_size must be >= 1, got {chunk_size}")
        await self._ensure()
        async for data in self._stream("read_file", path, self._read_stream, _p(path)):
            for start in range(0, len(data), chunk_size):
                yield bytes(data[start : start + chunk_size])

    async def access(self, path: str, *, writable: bool = False) -> None:
        _check("access", path)
        await self._call("access", path, "Access", pb.AccessRequest(path=path, writable=writable))

    async def detect_image_mime_type(self, path: str) -> str | None:
        _check("detect_image_mime_type", path)
        reply = await self._call("detect_image_mime_type", path, "DetectImageMimeType", _p(path))
        return reply.mime_type or None

    async def write_file(self, path: str, content: bytes | str, *, mode: int | None = None) -> None:
        _check("write_file", path)
        check_mode(mode, "write_file", path)
        data = content.encode() if isinstance(content, str) else bytes(content)
        if len(data) <= CHUNK_BYTES:
            # Most writes fit in one chunk: one unary call, which costs grpc.aio fewer batches
            # and tasks than a client stream. Not retried: a write is not idempotent.
            request = pb.WriteSmallFileRequest(path=path, data=data, mode=mode)
            await self._change("write_file", path, "WriteSmallFile", request)
            return
        await self._ensure()

        async def messages() -> AsyncIterator[bytes]:
            yield pb.WriteFileRequest(path=path, size=len(data), mode=mode).SerializeToString()
            for message in _data_messages(data):
                yield message

        try:
            await self._write_stream(
                messages(), timeout=self._call_timeout, metadata=self._metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise _error(exc, "write_file", path) from None

    async def write_chunks(
        self, path: str, chunks: AsyncIterable[bytes], *, mode: int | None = None
    ) -> None:
        """``write_file`` with content that arrives in pieces, never holding the whole file.

        An optional extension beyond the Operations protocols
        (:class:`~operations.ChunkedFileOperations`). The broker writes atomically: if ``chunks``
        raises or the call is cancelled, the stream is cancelled, nothing is written, and the
        error propagates.
        """
        _check("write_file", path)
        check_mode(mode, "write_file", path)
        await self._ensure()
        failure: list[BaseException] = []

        async def messages() -> AsyncIterator[bytes]:
            yield pb.WriteFileRequest(path=path, mode=mode).SerializeToString()
            try:
                async for piece in chunks:
                    for message in _data_messages(piece):
                        yield message
            except BaseException as exc:
                failure.append(exc)
                call.cancel()
                raise

        call = self._write_stream(messages(), timeout=self._call_timeout, metadata=self._metadata)
        try:
            await call
        except (grpc.aio.AioRpcError, asyncio.CancelledError) as exc:
            if failure:
                raise failure[0] from None
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise _error(exc, "write_file", path) from None

    async def mkdir(self, path: str) -> None:
        _check("mkdir", path)
        await self._change("mkdir", path, "Mkdir", _p(path))

    # -- LsOperations / FindOperations / GrepOperations ----------------------------------------

    async def exists(self, path: str) -> bool:
        _check("exists", path)
        return bool((await self._call("exists", path, "Exists", _p(path))).value)

    async def stat(self, path: str) -> FileStat:
        _check("stat", path)
        return stat_from_wire(await self._call("stat", path, "Stat", _p(path)))

    async def lstat(self, path: str) -> FileStat:
        _check("lstat", path)
        return stat_from_wire(await self._call("lstat", path, "Lstat", _p(path)))

    async def is_directory(self, path: str) -> bool:
        _check("is_directory", path)
        return bool((await self._call("is_directory", path, "IsDirectory", _p(path))).value)

    async def readdir(self, path: str) -> list[str]:
        _check("readdir", path)
        names: list[str] = []
        async for batch in self._messages("readdir", path, "Readdir", _p(path)):
            names.extend(batch.names)
        return names

    async def list_dir(self, path: str) -> list[DirEntry]:
        _check("list_dir", path)
        entries: list[DirEntry] = []
        async for batch in self._messages("list_dir", path, "ListDir", _p(path)):
            entries.extend(DirEntry(e.name, kind_from_wire(e.kind)) for e in batch.entries)
        return entries

    async def glob(
        self, pattern: str, cwd: str, *, ignore: Sequence[str] = (), limit: int = 1000
    ) -> list[str]:
        _check("glob", cwd, pattern, *ignore)
        request = pb.GlobRequest(pattern=pattern, cwd=cwd, ignore=list(ignore), limit=limit)
        found: list[str] = []
        async for batch in self._messages("glob", cwd, "Glob", request):
            found.extend(batch.names)
        return found

    async def search(
        self,
        pattern: str,
        path: str,
        *,
        glob: str | None = None,
        ignore_case: bool = False,
        literal: bool = False,
        limit: int = 100,
    ) -> AsyncIterator[SearchMatch]:
        _check("search", path, pattern, *(() if glob is None else (glob,)))
        request = pb.SearchRequest(
            pattern=pattern, path=path, ignore_case=ignore_case, literal=literal, limit=limit
        )
        if glob is not None:
            request.glob = glob
        async for match in self._messages("search", path, "Search", request):
            text = match.line_text if match.HasField("line_text") else None
            yield SearchMatch(match.path, match.line_number, text)

    # -- FileSystemOperations ------------------------------------------------------------------

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        _check("remove", path)
        request = pb.RemoveRequest(path=path, recursive=recursive)
        await self._change("remove", path, "Remove", request)

    async def rename(self, source: str, destination: str) -> None:
        _check("rename", source, destination)
        request = pb.RenameRequest(source=source, destination=destination)
        await self._change("rename", source, "Rename", request)

    # -- BashOperations ------------------------------------------------------------------------

    async def exec(
        self,
        command: str,
        cwd: str,
        *,
        on_data: OnData,
        signal: AbortSignal | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        return await self._exec(pb.SHELL_BASH, command, cwd, on_data, signal, timeout, env)

    async def _exec(
        self,
        shell: pb.Shell,
        command: str,
        cwd: str,
        on_data: OnData,
        signal: AbortSignal | None,
        timeout: float | None,
        env: Mapping[str, str] | None,
    ) -> ExecResult:
        if signal is not None and signal.aborted:
            return ExecResult(None, KillReason.ABORTED)
        _check("exec", cwd, command, *(env or {}).keys(), *(env or {}).values())
        # One request (Run), as on every transport: an abort travels as an AbortRun naming the
        # command by this id, on another stream, and the Run call then reports the kill.
        start = pb.ExecRequest(command=command, cwd=cwd, shell=shell, abort_id=os.urandom(16).hex())
        if env:
            start.env.update(env)
        if timeout is not None:
            start.timeout = timeout
        return await self._frames.exec(start, on_data, signal)

    async def _frame_stream(self, op: str, path: str | None) -> FrameStream:
        """A new ``Frames`` call (the pool in ``_frames`` reuses it for later calls)."""
        await self._ensure()
        return _FramesCall(self._frames_stream(metadata=self._metadata))


class _FramesCall(FrameStream):
    """One ``Frames`` call: its replies fed in by a reader task, its requests written in order
    by a writer task (grpc.aio takes one write at a time)."""

    what = "gRPC Frames stream"

    def __init__(self, call: Any) -> None:
        super().__init__(DEFAULT_MAX_FRAME_SIZE)
        self._call = call
        self._pending: list[bytes | memoryview] = []
        self._wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        self._reader = loop.create_task(self._read())
        self._writer = loop.create_task(self._write())

    async def _read(self) -> None:
        try:
            async for data in self._call:  # views of FrameBytes.data (chunk_data_view)
                self.received(data)
        except Exception as exc:  # the call's status (AioRpcError), or a broken channel
            self.fail(exc)
        else:
            self.fail(ConnectionResetError("the broker ended the stream"))

    async def _write(self) -> None:
        call, pending = self._call, self._pending
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while pending:  # one serialized FrameBytes of what is queued
                    data = bytes_field_message(_FRAME_DATA_FIELD, pending)
                    pending.clear()
                    await call.write(data)
        except Exception as exc:
            if not call.done():
                self.fail(exc)
            # else the call has ended, and its reader reports its status (why it ended)

    def error(self, exc: BaseException, op: str, path: str | None) -> OpsError:
        if isinstance(exc, grpc.aio.AioRpcError):
            if exc.code() is grpc.StatusCode.UNIMPLEMENTED:
                return Unavailable(
                    op,
                    path,
                    "the broker does not offer Frames, which this client needs: upgrade the broker",
                )
            if exc.code() in _LOST:
                return Unavailable(
                    op,
                    path,
                    f"{self.what} to the broker lost: {exc.details()} (gRPC {exc.code().name})",
                )
            return _error(exc, op, path)
        return super().error(exc, op, path)

    def writelines(self, parts: list[bytes | memoryview]) -> None:
        self._pending += parts
        self._wake.set()

    def close(self) -> None:
        self.fail(ConnectionAbortedError("the stream was closed"))
        self._writer.cancel()
        self._call.cancel()


_FRAME_DATA_FIELD: Final = pb.FrameBytes.DESCRIPTOR.fields_by_name["data"].number

_LOST = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN})
"""How a ``Frames`` stream ends when its connection breaks (a broker killed, restarted, gone):
the broker's own errors come in ``END`` frames, its refusals as other codes."""


def _unreachable(call: FrameCall | None) -> bool:
    """Whether ``call`` failed because its stream lost the broker, not because the broker said
    so: worth a retry for a read-only call."""
    failure = None if call is None else call.failure
    if isinstance(failure, grpc.aio.AioRpcError):
        return failure.code() in _LOST
    return isinstance(failure, ConnectionError)  # the broker ended the stream (it stopped)


def _check(op: str, path: object, *texts: object) -> None:
    """Refuse, as the broker would, a path or text the wire cannot carry (not a ``str``, or not
    encodable as UTF-8, e.g. a lone surrogate from a non-UTF-8 file name)."""
    for value in (path, *texts):
        if not isinstance(value, str):
            raise InvalidArgument(op, None, f"expected a str, got {type(value).__name__}")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            shown = path if isinstance(path, str) and value is not path else None
            raise InvalidArgument(
                op, shown, f"{value!r} is not valid UTF-8 (the broker accepts UTF-8 names only)"
            ) from None


_DATA_FIELD: Final = pb.WriteFileRequest.DESCRIPTOR.fields_by_name["data"].number


def _data_messages(content: bytes) -> Iterator[bytes]:
    """Serialized ``WriteFileRequest(data=...)`` messages of at most ``CHUNK_BYTES`` of
    ``content`` each, framed with one copy of it: a message built and serialized copies the
    piece twice, and cutting the piece out once more. Fewer large buffers also means fewer
    pages the allocator must fault in afresh in a process that has not tuned it."""
    view = memoryview(content)
    for start in range(0, len(view), CHUNK_BYTES):
        yield bytes_field_message(_DATA_FIELD, [view[start : start + CHUNK_BYTES]])


def _p(path: str) -> pb.PathRequest:
    return pb.PathRequest(path=path)


# -- connect() ---------------------------------------------------------------------------------


def _read_option_file(options: dict[str, Any], key: str) -> bytes | None:
    value = options.pop(key, None)
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    return Path(os.fspath(value)).read_bytes()


def open_from_url(parts: urllib.parse.SplitResult, options: dict[str, Any]) -> GrpcBackend:
    """The ``connect()`` factory for ``grpc://HOST:PORT``, ``grpcs://HOST:PORT`` and
    ``grpc+unix:///PATH``.

    Options: ``token`` (default ``$OPSBROKER_TOKEN``), ``call_timeout``, ``exec_grace``,
    ``reconnect_wait``, ``tune_allocator``; for ``grpcs``: ``ca_file`` (the broker's CA; default the system roots),
    ``client_cert`` and ``client_key`` (mutual TLS), ``server_name`` (override the name checked in the certificate).
    """
    options = dict(options)
    url = urllib.parse.urlunsplit(parts)
    scheme = parts.scheme.lower()
    token = options.pop("token", None) or os.environ.get("OPSBROKER_TOKEN")
    credentials: grpc.ChannelCredentials | None = None
    channel_options: list[tuple[str, Any]] = []
    if scheme == "grpc+unix":
        path = parts.path or parts.netloc
        if not path:
            raise InvalidArgument("connect", url, "expected grpc+unix:///path/to/broker.sock")
        target = f"unix:{path}"
    else:
        if not parts.hostname or parts.port is None:
            raise InvalidArgument("connect", url, f"expected {scheme}://HOST:PORT")
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        target = f"{host}:{parts.port}"
    if scheme == "grpcs":
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read_option_file(options, "ca_file"),
            private_key=_read_option_file(options, "client_key"),
            certificate_chain=_read_option_file(options, "client_cert"),
        )
        server_name = options.pop("server_name", None)
        if server_name:
            channel_options.append(("grpc.ssl_target_name_override", server_name))
    tune = options.pop("tune_allocator", False)
    if not isinstance(tune, bool):
        raise InvalidArgument("connect", url, f"tune_allocator must be True or False, not {tune!r}")
    known = {"call_timeout", "exec_grace", "reconnect_wait"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise InvalidArgument("connect", url, f"unknown option(s) {', '.join(unknown)}")
    return GrpcBackend(
        target,
        token=token,
        credentials=credentials,
        tune_allocator=tune,
        options=channel_options,
        **{k: float(v) for k, v in options.items()},
    )
