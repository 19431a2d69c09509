"""The broker service: the one table of handlers behind every front-end.

Each handler takes a request message of ``service Broker`` (``proto/opsbroker/v1``) and a
:class:`Call`, calls the backend the call runs on, and sends the reply messages. Validation, limits,
error texts, the idle timeout of client streams, output coalescing and shutdown all live here, so
the gRPC servicer and the SSH subsystem are translations of their wire into these calls and hold
no logic of their own: a difference between them is a bug here or in a translation.

A transport looks a method up in :data:`METHODS`, decodes the request (``Method.request``), hands
in a :class:`Call`, and turns an :class:`~operations.OpsError` raised here into its own status.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Final, Protocol

from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage
from opsbroker.v1 import broker_pb2 as pb
from opsbroker.v1.codec import (
    CHUNK_BYTES,
    batches,
    capabilities_to_wire,
    entry_to_wire,
    exit_to_wire,
    match_to_wire,
    output_to_wire,
    process_to_wire,
    pty_from_wire,
    stat_to_wire,
)

from operations import (
    AbortController,
    Backend,
    BashOperations,
    GuardedBackend,
    InvalidArgument,
    KillReason,
    ProcessOutput,
    Timeout,
    TooLarge,
    check_timeout,
    read_chunks,
    read_small,
    write_chunks,
)

from .._guard import Enforcement
from ._output import CommandOutput
from ._runs import Runs

__all__ = [
    "CHUNK_FIELD",
    "DEFAULT_MAX_UPLOAD_BYTES",
    "METHODS",
    "STREAM_IDLE_TIMEOUT",
    "Call",
    "ChunkSend",
    "Method",
    "Service",
    "broker_version",
    "call_subject",
    "capabilities_of",
    "decode",
    "log_call",
    "undecodable",
]

DEFAULT_MAX_UPLOAD_BYTES: Final = 1024 * 1024 * 1024
"""Most bytes one WriteFile may stream in (the core streams to a temp file, but a backend without
``write_chunks`` buffers the whole file before its atomic write)."""

STREAM_IDLE_TIMEOUT: Final = 60.0
"""Seconds a client stream may stall between messages before the call gives up (Timeout)."""

OUTPUT_EVENT_BYTES: Final = 4 * CHUNK_BYTES
"""Command output merged into one ExecEvent, at most (well under gRPC's 4 MiB)."""


LOGGED_COMMAND_CHARS: Final = 80
"""How much of a command a call's log line shows (the audit log has all of it, or its digest)."""


CHUNK_FIELD: Final = pb.Chunk.DESCRIPTOR.fields_by_name["data"].number
"""The number of ``Chunk.data``, the field :meth:`ChunkSend.chunk` frames a piece as."""


class ChunkSend(Protocol):
    """A call's ``send`` that also takes a file's piece as raw bytes (``send.chunk``): the
    transport frames it as the bytes of ``Chunk(data=piece)`` without building that message
    (which copies the piece twice more). ReadFile uses it where a transport offers it."""

    def __call__(self, message: ProtoMessage) -> Awaitable[None]: ...

    def chunk(self, data: bytes) -> Awaitable[None]: ...


class Call(Protocol):
    """What a transport offers one running call."""

    subject: str | None
    """What the call's log line names (:func:`call_subject` of its request); an upload sets it
    from its first message, which carries the path."""

    @property
    def ops(self) -> Backend:
        """The backend this call runs on: the core behind the caller's policy and audit."""
        ...

    @property
    def principal(self) -> str | None:
        """Who is calling (aborts are matched per principal)."""
        ...

    async def send(self, message: ProtoMessage) -> None:
        """Send one reply message (waits while the peer is not reading: backpressure)."""
        ...

    async def receive(self) -> ProtoMessage | None:
        """The next message of a client stream, decoded as the method's request type, or
        ``None`` at the end of the stream.

        Raises:
            InvalidArgument: the message does not decode.
        """
        ...

    async def discard_input(self) -> None:
        """After a failure, consume what the client still sends if this transport needs that
        for the failure to reach it (gRPC); a no-op where it does not."""
        ...


def broker_version() -> str:
    """The installed opsbroker's version (``0+unknown`` from a bare source tree)."""
    try:
        return metadata.version("opsbroker")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def capabilities_of(backend: Backend, enforcement: Enforcement | None = None) -> dict[str, Any]:
    """What ``Capabilities`` reports: the backend's own facts (``backend.capabilities()``, if
    it has one), with the limits the broker's policy adds when ``enforcement`` guards it.

    The policy's read limit narrows the core's; its write, output and timeout limits are the
    guard's alone. A backend that does not say whether commands are sandboxed is reported as
    the policy's sandbox says.
    """
    describe = getattr(backend, "capabilities", None)
    info = dict(describe() if callable(describe) else {})
    if enforcement is None:
        return info
    policy = enforcement.policy
    limits = dict(info.get("limits") or {})
    core_read = limits.get("max_read_bytes")
    limits["max_read_bytes"] = (
        policy.max_read_bytes if core_read is None else min(core_read, policy.max_read_bytes)
    )
    limits["max_write_bytes"] = policy.max_write_bytes
    limits["max_output_bytes"] = policy.exec.max_output_bytes
    limits["default_timeout"] = policy.exec.default_timeout
    limits["max_timeout"] = policy.exec.max_timeout
    info["limits"] = limits
    info.setdefault("command_sandbox", enforcement.sandbox_active)
    return info


def call_subject(request: object, ops: Backend | None = None) -> str | None:
    """What a call's log line names: the request's path (or source, or a command's cwd), shown
    with ``!r``, and a command's first :data:`LOGGED_COMMAND_CHARS` characters, or, when ``ops``
    is a :class:`~operations.GuardedBackend` whose policy has ``audit.log_commands`` off, the
    command's digest as the audit records it (the log says no more than the audit)."""
    named = None
    for field in ("path", "source", "cwd"):
        value = getattr(request, field, None)
        if isinstance(value, str):
            named = repr(value)
            break
    command = getattr(request, "command", None)
    if isinstance(command, str):
        if isinstance(ops, GuardedBackend):
            command = ops.command_as_audited(command)
        shown = command[:LOGGED_COMMAND_CHARS] + (
            "..." if len(command) > LOGGED_COMMAND_CHARS else ""
        )
        return f"{named} $ {shown!r}"
    return named


def log_call(
    log: logging.Logger,
    principal: str | None,
    op: str,
    subject: str | None,
    outcome: str,
    started: float,
) -> None:
    """The one log line of a finished call, the same on every front-end: who, what, on what,
    and how it ended (``ok`` or the error's code). ``started`` is a ``time.perf_counter()``."""
    if log.isEnabledFor(logging.INFO):
        elapsed = (time.perf_counter() - started) * 1000
        what = op if subject is None else f"{op} {subject}"  # e.g. capabilities: no subject
        log.info("%s %s -> %s (%.1f ms)", principal, what, outcome, elapsed)


def decode(cls: type[ProtoMessage], data: bytes, op: str) -> ProtoMessage:
    """Deserialize a request message; a malformed one is the caller's InvalidArgument."""
    message = cls()
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise undecodable(op, type(exc).__name__) from None
    return message


def undecodable(op: str, why: str) -> InvalidArgument:
    """The one refusal of a request message that does not decode, on every transport."""
    return InvalidArgument(op, None, f"undecodable request message ({why})")


class Service:
    """The handlers of ``service Broker``.

    Args:
        version: reported by ``Capabilities``.
        root: the workspace root, reported by ``Capabilities``.
        info: what ``Capabilities`` reports about the backend (:func:`capabilities_of`: the
            keys of ``Broker.capabilities()``).
        read_chunk_bytes: the size of ReadFile's pieces, at most ``CHUNK_BYTES`` (a transport
            picks the size whose messages fit its packets).
        output_event_bytes: the most output one ExecEvent carries (what fits one message).
        max_upload_bytes: the most bytes a WriteFile may stream in before it is refused.
    """

    def __init__(
        self,
        *,
        version: str,
        root: str,
        info: Mapping[str, Any],
        read_chunk_bytes: int = CHUNK_BYTES,
        output_event_bytes: int = OUTPUT_EVENT_BYTES,
        max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
    ) -> None:
        if not 0 < read_chunk_bytes <= CHUNK_BYTES:
            raise ValueError(
                f"read_chunk_bytes must be in 1..{CHUNK_BYTES}, got {read_chunk_bytes}"
            )
        self._capabilities = capabilities_to_wire(version, root, info)
        self.read_chunk_bytes = read_chunk_bytes
        self.output_event_bytes = output_event_bytes
        self.max_upload_bytes = max_upload_bytes
        self._running: set[AbortController] = set()
        self._runs: Runs[tuple[str | None, str]] = Runs()  # by (principal, abort_id)
        self._cleanups: set[asyncio.Future[None]] = set()

    # -- lifetime ------------------------------------------------------------------------------

    @property
    def running(self) -> int:
        """How many commands are running now."""
        return len(self._running)

    def kill_running(self) -> int:
        """Abort every running command (the broker stops); their callers see ``SHUTDOWN``."""
        running = list(self._running)
        for controller in running:
            controller.abort(KillReason.SHUTDOWN)
        return len(running)

    async def drain(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) for cleanups that outlived their calls."""
        if self._cleanups:
            await asyncio.wait(set(self._cleanups), timeout=timeout)

    async def _finish(self, cleanup: Awaitable[None]) -> None:
        """Run ``cleanup`` (closing a backend stream: its helper process must be reaped) to the
        end even if this call is cancelled again meanwhile; :meth:`drain` waits for leftovers."""
        task = asyncio.ensure_future(cleanup)
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)
        task.add_done_callback(_retrieve)
        await asyncio.shield(task)

    # -- the handlers --------------------------------------------------------------------------

    async def Capabilities(self, request: pb.CapabilitiesRequest, call: Call) -> None:
        await call.send(self._capabilities)

    async def ReadFile(self, request: pb.PathRequest, call: Call) -> None:
        pieces = read_chunks(call.ops, request.path, self.read_chunk_bytes)
        send_chunk: Callable[[bytes], Awaitable[None]] | None = getattr(call.send, "chunk", None)
        try:
            async for piece in pieces:
                if send_chunk is not None:
                    await send_chunk(piece)
                else:
                    await call.send(pb.Chunk(data=piece))
        except BaseException:
            # A stream that ran to its end is closed already; only an interrupted one must
            # still be closed (and the cleanup task costs a loop pass: not per call).
            await self._finish(pieces.aclose())
            raise

    async def ReadSmallFile(self, request: pb.PathRequest, call: Call) -> None:
        data = await read_small(call.ops, request.path, CHUNK_BYTES)
        await call.send(pb.SmallFile(data=data or b"", complete=data is not None))

    async def Access(self, request: pb.AccessRequest, call: Call) -> None:
        await call.ops.access(request.path, writable=request.writable)
        await call.send(pb.Empty())

    async def DetectImageMimeType(self, request: pb.PathRequest, call: Call) -> None:
        mime = await call.ops.detect_image_mime_type(request.path)
        await call.send(pb.MimeTypeReply(mime_type=mime or ""))

    async def WriteFile(self, request: None, call: Call) -> None:
        """A stream of ``WriteFileRequest``: the first names the path (and may announce the
        size); the content follows. Nothing is written unless the whole stream arrives."""
        try:
            path, mode, pieces = await self._upload(call)
            await write_chunks(call.ops, path, pieces, mode=mode)
        except BaseException:
            await call.discard_input()
            raise
        await call.send(pb.Empty())

    async def WriteSmallFile(self, request: pb.WriteSmallFileRequest, call: Call) -> None:
        """``WriteFile`` of content that fits one chunk, in one message: the same checks, the
        same ``write_chunks`` call (so the same policy, audit line, errors and atomic write);
        content above :data:`CHUNK_BYTES` is refused unread, and the client streams it."""
        path = request.path
        if len(request.data) > CHUNK_BYTES:
            raise InvalidArgument(
                "write_file",
                path,
                f"WriteSmallFile carries at most {CHUNK_BYTES} bytes, got {len(request.data)}; "
                "use WriteFile for larger content",
            )
        pieces = self._pieces(path, request, _end_of_stream, None)
        await write_chunks(call.ops, path, pieces, mode=_mode(request))
        await call.send(pb.Empty())

    async def _upload(self, call: Call) -> tuple[str, int | None, AsyncIterator[bytes]]:
        first = await _next(call, "write_file")
        if not isinstance(first, pb.WriteFileRequest) or not first.path:
            raise InvalidArgument(
                "write_file", None, "the first message of the stream must carry the path"
            )
        path = first.path
        call.subject = repr(path)
        expected = first.size if first.HasField("size") else None
        if expected is not None and expected < 0:
            raise InvalidArgument("write_file", path, f"`size` must be >= 0, got {expected}")

        def following() -> Awaitable[ProtoMessage | None]:
            return _next(call, "write_file")

        return path, _mode(first), self._pieces(path, first, following, expected)

    async def _pieces(
        self,
        path: str,
        first: pb.WriteFileRequest | pb.WriteSmallFileRequest,
        following: Callable[[], Awaitable[ProtoMessage | None]],
        expected: int | None,
    ) -> AsyncIterator[bytes]:
        """The content of an upload: ``first``'s data, then that of each message ``following``
        returns until ``None``; checked against the announced size ``expected`` and the upload
        cap as it arrives (inside the write, so a refusal is audited as the write's outcome)."""
        cap = self.max_upload_bytes
        received = 0
        message: pb.WriteFileRequest | pb.WriteSmallFileRequest | None = first
        while message is not None:
            data = message.data
            received += len(data)
            if expected is not None and received > expected:
                raise InvalidArgument(
                    "write_file", path, f"stream is longer than its size {expected}"
                )
            if received > cap:
                raise TooLarge("write_file", path, f"upload exceeds {cap} bytes")
            if data:
                yield data
            message = await following()  # type: ignore[assignment]
        if expected is not None and received != expected:
            raise InvalidArgument(
                "write_file",
                path,
                f"stream ended after {received} of {expected} bytes; nothing was written",
            )

    async def Mkdir(self, request: pb.PathRequest, call: Call) -> None:
        await call.ops.mkdir(request.path)
        await call.send(pb.Empty())

    async def Exists(self, request: pb.PathRequest, call: Call) -> None:
        await call.send(pb.BoolReply(value=await call.ops.exists(request.path)))

    async def Stat(self, request: pb.PathRequest, call: Call) -> None:
        await call.send(stat_to_wire(await call.ops.stat(request.path)))

    async def Lstat(self, request: pb.PathRequest, call: Call) -> None:
        await call.send(stat_to_wire(await call.ops.lstat(request.path)))

    async def IsDirectory(self, request: pb.PathRequest, call: Call) -> None:
        await call.send(pb.BoolReply(value=await call.ops.is_directory(request.path)))

    async def Readdir(self, request: pb.PathRequest, call: Call) -> None:
        for batch in batches(await call.ops.readdir(request.path)):
            await call.send(pb.Names(names=batch))

    async def ListDir(self, request: pb.PathRequest, call: Call) -> None:
        entries = await call.ops.list_dir(request.path)
        for batch in batches(entries, lambda entry: entry.name):
            await call.send(pb.DirEntries(entries=[entry_to_wire(e) for e in batch]))

    async def Remove(self, request: pb.RemoveRequest, call: Call) -> None:
        await call.ops.remove(request.path, recursive=request.recursive)
        await call.send(pb.Empty())

    async def Rename(self, request: pb.RenameRequest, call: Call) -> None:
        await call.ops.rename(request.source, request.destination)
        await call.send(pb.Empty())

    async def Glob(self, request: pb.GlobRequest, call: Call) -> None:
        found = await call.ops.glob(
            request.pattern, request.cwd, ignore=list(request.ignore), limit=request.limit
        )
        for batch in batches(found):
            await call.send(pb.Names(names=batch))

    async def Search(self, request: pb.SearchRequest, call: Call) -> None:
        matches = call.ops.search(
            request.pattern,
            request.path,
            glob=request.glob if request.HasField("glob") else None,
            ignore_case=request.ignore_case,
            literal=request.literal,
            limit=request.limit,
        )
        try:
            async for match in matches:
                await call.send(match_to_wire(match))
        finally:
            aclose = getattr(matches, "aclose", None)
            if aclose is not None:
                await self._finish(aclose())

    async def Run(self, request: pb.ExecRequest, call: Call) -> None:
        """Run a command, streaming its output, then its exit event; ``AbortRun`` with the
        request's ``abort_id`` (same principal) aborts it, and the exit event says so.

        **Cancellation:** cancelling the call cancels the backend's exec, which kills the tree
        before the cancellation propagates.
        """
        runner = _runner(call.ops, request)
        timeout = check_timeout(
            request.timeout if request.HasField("timeout") else None, "exec", request.cwd
        )
        controller = AbortController()
        if not request.abort_id:
            await self._run(runner, request, timeout, call, controller)
            return
        with self._runs.running((call.principal, request.abort_id), controller, request.cwd):
            await self._run(runner, request, timeout, call, controller)

    async def AbortRun(self, request: pb.AbortRunRequest, call: Call) -> None:
        if not request.abort_id:
            raise InvalidArgument("abort_exec", None, "`abort_id` must not be empty")
        self._runs.abort((call.principal, request.abort_id))
        await call.send(pb.Empty())

    # -- processes that outlive a call --------------------------------------------------------

    async def StartProcess(self, request: pb.StartProcessRequest, call: Call) -> None:
        def limit(field: str) -> float | None:
            value = getattr(request, field) if request.HasField(field) else None
            return check_timeout(value, "start_process", request.cwd)

        info = await call.ops.processes.start(
            request.command,
            request.cwd,
            env=dict(request.env) if request.env else None,
            pty=pty_from_wire(request.pty) if request.HasField("pty") else None,
            timeout=limit("timeout"),
            idle_timeout=limit("idle_timeout"),
            backpressure=request.backpressure,
        )
        await call.send(process_to_wire(info))

    async def AttachProcess(self, request: pb.AttachProcessRequest, call: Call) -> None:
        outputs = call.ops.processes.attach(request.id, from_offset=request.from_offset)
        try:
            async for output in outputs:
                data, offset, dropped = output.data, output.offset, output.dropped
                for start in range(0, max(len(data), 1), self.read_chunk_bytes):
                    piece = data[start : start + self.read_chunk_bytes]
                    part = ProcessOutput(offset + start, piece, output.stream, dropped)
                    dropped = 0
                    await call.send(output_to_wire(part))
        finally:
            aclose = getattr(outputs, "aclose", None)
            if aclose is not None:
                await self._finish(aclose())

    async def WriteStdin(self, request: pb.WriteStdinRequest, call: Call) -> None:
        await call.ops.processes.write_stdin(request.id, request.data)
        await call.send(pb.Empty())

    async def CloseStdin(self, request: pb.ProcessRequest, call: Call) -> None:
        await call.ops.processes.close_stdin(request.id)
        await call.send(pb.Empty())

    async def SignalProcess(self, request: pb.SignalProcessRequest, call: Call) -> None:
        await call.ops.processes.signal(request.id, request.signal)
        await call.send(pb.Empty())

    async def ResizeProcess(self, request: pb.ResizeProcessRequest, call: Call) -> None:
        processes = call.ops.processes
        await processes.resize(request.id, request.cols, request.rows)
        await call.send(pb.Empty())

    async def ListProcesses(self, request: pb.Empty, call: Call) -> None:
        found = await call.ops.processes.list_processes()
        await call.send(pb.ProcessList(processes=[process_to_wire(info) for info in found]))

    async def WaitProcess(self, request: pb.ProcessRequest, call: Call) -> None:
        info = await call.ops.processes.wait(request.id)
        await call.send(process_to_wire(info))

    async def KillProcess(self, request: pb.ProcessRequest, call: Call) -> None:
        info = await call.ops.processes.kill(request.id)
        await call.send(process_to_wire(info))

    async def _run(
        self,
        runner: BashOperations,
        request: pb.ExecRequest,
        timeout: float | None,
        call: Call,
        controller: AbortController,
    ) -> None:
        output = CommandOutput(call.send, event_bytes=self.output_event_bytes)
        self._running.add(controller)
        try:
            result = await runner.exec(
                request.command,
                request.cwd,
                on_data=output,
                signal=controller.signal,
                timeout=timeout,
                env=dict(request.env) if request.env else None,
            )
        finally:
            self._running.discard(controller)
        await output.drain()
        await call.send(pb.ExecEvent(exit=exit_to_wire(result)))


def _runner(ops: Backend, request: pb.ExecRequest) -> BashOperations:
    if request.shell == pb.SHELL_POWERSHELL:
        return ops.powershell
    if request.shell in (pb.SHELL_UNSPECIFIED, pb.SHELL_BASH):
        return ops
    raise InvalidArgument("exec", request.cwd, f"unknown shell {request.shell}")


async def _next(call: Call, op: str) -> ProtoMessage | None:
    """The next client message; a stream stalled past :data:`STREAM_IDLE_TIMEOUT` is Timeout."""
    try:
        async with asyncio.timeout(STREAM_IDLE_TIMEOUT):
            return await call.receive()
    except TimeoutError:
        raise Timeout(op, None, f"no message from the client for {STREAM_IDLE_TIMEOUT} s") from None


async def _end_of_stream() -> None:
    """The rest of a one-message upload (WriteSmallFile): nothing."""
    return None


def _mode(message: pb.WriteFileRequest | pb.WriteSmallFileRequest) -> int | None:
    """An upload's permission bits, ``None`` when the message leaves them unset."""
    return message.mode if message.HasField("mode") else None


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


Handler = Callable[[Service, Any, Call], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Method:
    """One method of ``service Broker``: its handler and how it travels."""

    name: str
    op: str  # the operation named in errors and logs
    handler: Handler
    request: type[ProtoMessage]
    reply: type[ProtoMessage]
    client_streaming: bool
    server_streaming: bool


_OPS: Final = {
    "ReadSmallFile": "read_file",
    "WriteSmallFile": "write_file",
    "Run": "exec",
    "AbortRun": "abort_exec",
}


CARRIERS: Final = frozenset({"Frames"})
"""Methods of ``service Broker`` that carry the others' calls instead of being one."""


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


def _methods() -> dict[str, Method]:
    service = pb.DESCRIPTOR.services_by_name["Broker"]
    table = {}
    for name, method in service.methods_by_name.items():
        if name in CARRIERS:
            continue
        table[name] = Method(
            name=name,
            op=_OPS.get(name, _snake(name)),
            handler=getattr(Service, name),
            request=getattr(pb, method.input_type.name),
            reply=getattr(pb, method.output_type.name),
            client_streaming=method.client_streaming,
            server_streaming=method.server_streaming,
        )
    return table


METHODS: Final[dict[str, Method]] = _methods()
"""Every method of ``service Broker``, by name: the dispatch table of every transport."""
