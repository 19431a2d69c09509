"""The gRPC front-end: the ``opsbroker.v1.Broker`` service over any ``operations.Backend``.

Each method is a translation: wire message -> backend call -> wire message, inside one
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
import collections
import math
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from typing import Any, TypeVar

import grpc
import grpc.aio
from opsbroker.v1 import broker_pb2 as pb
from opsbroker.v1 import broker_pb2_grpc as pb_grpc
from opsbroker.v1.codec import (
    CHUNK_BYTES,
    LIST_BATCH_BYTES,
    kill_reason_to_wire,
    kind_to_wire,
    stat_to_wire,
)

from operations import (
    AbortController,
    Backend,
    InvalidArgument,
    KillReason,
    OpsError,
    Timeout,
    read_chunks,
    read_small,
    write_chunks,
)

from .._guard import Enforcement
from ._grpcauth import AuthenticatedServer, Authenticator
from ._grpcwire import SERVICE_NAME, CallScope, Undecodable, current_principal
from ._runs import Runs

__all__ = [
    "SERVICE_NAME",
    "AuthenticatedServer",
    "Authenticator",
    "BrokerServicer",
]

MAX_GUARDS = 1024  # cached (principal, peer) policy guards; cleared when full
OUTPUT_EVENT_BYTES = 4 * CHUNK_BYTES  # output merged into one event, at most (well under 4 MiB)
OUTPUT_BUFFER = 4 * CHUNK_BYTES  # output a command may have pending before its producer waits
STREAM_IDLE_TIMEOUT = 60.0  # seconds a client stream may stall between messages before we give up


_T = TypeVar("_T")
_SHUTDOWN = object()  # the abort reason of commands killed because the broker stops


async def _read(context: grpc.aio.ServicerContext[Any, Any], op: str) -> Any:
    """The next client message, or ``grpc.aio.EOF``; a stream stalled too long is a Timeout."""
    try:
        async with asyncio.timeout(STREAM_IDLE_TIMEOUT):
            message = await context.read()
    except TimeoutError:
        raise Timeout(op, None, f"no message from the client for {STREAM_IDLE_TIMEOUT} s") from None
    if isinstance(message, Undecodable):
        raise message.error(op)
    return message


async def _drain(context: grpc.aio.ServicerContext[Any, Any]) -> None:
    """Read and drop what the client still sends before the call fails: a client whose write
    meets an already-finished call sees grpc's "internal error", not the broker's status."""
    try:
        while await _read(context, "drain") is not grpc.aio.EOF:
            pass
    except Exception:  # the call is over either way; the caller reports the first error
        return


def _batches(items: Iterable[_T], name: Callable[[_T], str] = str) -> Iterable[list[_T]]:
    """``items`` in lists of about :data:`LIST_BATCH_BYTES`, so no message nears a size cap."""
    batch: list[_T] = []
    size = 0
    for item in items:
        batch.append(item)
        size += len(name(item)) + 8
        if size >= LIST_BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _exec_timeout(request: pb.ExecRequest) -> float | None:
    if not request.HasField("timeout"):
        return None
    timeout = request.timeout
    if not math.isfinite(timeout) or timeout < 0:
        raise InvalidArgument(
            "exec",
            request.cwd,
            f"`timeout` must be a non-negative number of seconds, got {timeout}",
        )
    return timeout


class BrokerServicer(pb_grpc.BrokerServicer):
    """``opsbroker.v1.Broker`` over ``backend``.

    Args:
        backend: what does the work (the broker core, or any ``operations.Backend``).
        version: reported by ``Capabilities``.
        info: extra ``Capabilities`` facts the backend knows (``resolver``, ``cgroup_kill``,
            ``sandbox``, ``powershell``, ``limits``); by default read from ``backend.capabilities()``
            when the backend has that method.
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
        self._version = version
        if info is None:
            describe = getattr(backend, "capabilities", None)
            info = dict(describe() if callable(describe) else {})
            if enforcement is not None:
                sandbox = enforcement.capabilities().get("sandbox")
                if isinstance(sandbox, Mapping):
                    info["sandbox"] = bool(sandbox.get("active"))
        self._info: Mapping[str, Any] = info
        self._enforcement = enforcement
        self._guards: dict[tuple[str, str], Backend] = {}
        self._running: set[AbortController] = set()
        self._runs: Runs[tuple[str | None, str]] = Runs()  # by (principal, abort_id)
        self._cleanups: set[asyncio.Future[None]] = set()

    def _ops(self, context: grpc.aio.ServicerContext[Any, Any]) -> Backend:
        """The backend this call uses: the core behind the broker's policy and audit, as the
        caller's principal (one guard per principal and peer, kept while they keep calling)."""
        if self._enforcement is None:
            return self._backend
        key = (current_principal.get(), context.peer() or "")
        guard = self._guards.get(key)
        if guard is None:
            if len(self._guards) >= MAX_GUARDS:
                self._guards.clear()
            guard = self._enforcement.wrap(
                self._backend, principal=key[0], transport="grpc", peer=key[1]
            )
            self._guards[key] = guard
        return guard

    def kill_running(self) -> int:
        """Abort every running command (broker shutdown); their callers see ``SHUTDOWN``."""
        running = list(self._running)
        for controller in running:
            controller.abort(_SHUTDOWN)
        return len(running)

    async def _finish(self, cleanup: Coroutine[Any, Any, None]) -> None:
        """Run ``cleanup`` (closing a backend stream: its helper process must be reaped) to the
        end even if this call is cancelled again meanwhile; :meth:`drain` waits for leftovers."""
        task = asyncio.ensure_future(cleanup)
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)
        task.add_done_callback(_retrieve)
        await asyncio.shield(task)

    async def drain(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) for cleanups that outlived their calls."""
        if self._cleanups:
            await asyncio.wait(set(self._cleanups), timeout=timeout)

    @property
    def running(self) -> int:
        """How many commands are running now."""
        return len(self._running)

    # -- Capabilities --------------------------------------------------------------------------

    async def Capabilities(
        self, request: pb.CapabilitiesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CapabilitiesReply:
        async with CallScope(context, "capabilities", None):
            limits = pb.Limits(chunk_bytes=CHUNK_BYTES)
            for key, value in dict(self._info.get("limits") or {}).items():
                if value is not None and key in pb.Limits.DESCRIPTOR.fields_by_name:
                    setattr(limits, key, value)
            return pb.CapabilitiesReply(
                version=self._version,
                root=self._backend.root,
                resolver=str(self._info.get("resolver", "")),
                cgroup_kill=bool(self._info.get("cgroup_kill", False)),
                sandbox=bool(self._info.get("sandbox", False)),
                powershell=bool(self._info.get("powershell", False)),
                limits=limits,
            )

    # -- files ---------------------------------------------------------------------------------

    async def ReadFile(
        self, request: pb.PathRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        async with CallScope(context, "read_file", request.path):
            pieces = read_chunks(self._ops(context), request.path, CHUNK_BYTES)
            try:
                async for piece in pieces:
                    await context.write(pb.Chunk(data=piece))
            except BaseException:
                # A stream that ran to its end is closed already; only an interrupted one
                # must still be closed (and the cleanup task costs a loop pass: not per call).
                await self._finish(pieces.aclose())
                raise

    async def ReadSmallFile(
        self, request: pb.PathRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.SmallFile:
        async with CallScope(context, "read_file", request.path):
            data = await read_small(self._ops(context), request.path, CHUNK_BYTES)
            if data is None:
                return pb.SmallFile(complete=False)
            return pb.SmallFile(data=data, complete=True)

    async def Access(
        self, request: pb.AccessRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.Empty:
        async with CallScope(context, "access", request.path):
            await self._ops(context).access(request.path, writable=request.writable)
            return pb.Empty()

    async def DetectImageMimeType(
        self, request: pb.PathRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.MimeTypeReply:
        async with CallScope(context, "detect_image_mime_type", request.path):
            mime = await self._ops(context).detect_image_mime_type(request.path)
            return pb.MimeTypeReply(mime_type=mime or "")

    async def WriteFile(
        self, request_iterator: object, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.Empty:
        async with CallScope(context, "write_file", None):
            try:
                await self._write_file(context)
            except OpsError as error:
                if not isinstance(error, Timeout):
                    await _drain(context)
                raise
            return pb.Empty()

    async def _write_file(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        first = await _read(context, "write_file")
        if first is grpc.aio.EOF or not first.path:
            raise InvalidArgument(
                "write_file", None, "the first message of the stream must carry the path"
            )
        path: str = first.path
        expected = first.size if first.HasField("size") else None
        if expected is not None and expected < 0:
            raise InvalidArgument("write_file", path, f"`size` must be >= 0, got {expected}")

        async def pieces() -> AsyncIterator[bytes]:
            received = len(first.data)
            if first.data:
                yield first.data
            while True:
                message = await _read(context, "write_file")
                if message is grpc.aio.EOF:
                    break
                received += len(message.data)
                if expected is not None and received > expected:
                    raise InvalidArgument(
                        "write_file", path, f"stream is longer than its size {expected}"
                    )
                yield message.data
            if expected is not None and received != expected:
                raise InvalidArgument(
                    "write_file",
                    path,
                    f"stream ended after {received} of {expected} bytes; nothing was written",
                )

        await write_chunks(self._ops(context), path, pieces())

    async def Mkdir(
        self, request: pb.PathRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.Empty:
        async with CallScope(context, "mkdir", request.path):
            await self._ops(context).mkdir(request.path)
            return pb.Empty()

    async def Exists(
        self, request: pb.PathRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.BoolReply:
        async with CallScope(context, "exists", request.path):
            return pb.BoolReply(value=await self._ops(context).exists(request.path))

    async def Stat(
        self, request: pb.PathRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.FileStat:
        async with CallScope(context, "stat", request.path):
            return stat_to_wire(await self._ops(context).stat(request.path))

    async def Lstat(
        self, request: pb.PathRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.FileStat:
        async with CallScope(context, "lstat", request.path):
            return stat_to_wire(await self._ops(context).lstat(request.path))

    async def IsDirectory(
        self, request: pb.PathRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.BoolReply:
        async with CallScope(context, "is_directory", request.path):
            return pb.BoolReply(value=await self._ops(context).is_directory(request.path))

    async def Readdir(
        self, request: pb.PathRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        async with CallScope(context, "readdir", request.path):
            for batch in _batches(await self._ops(context).readdir(request.path)):
                await context.write(pb.Names(names=batch))

    async def ListDir(
        self, request: pb.PathRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        async with CallScope(context, "list_dir", request.path):
            entries = await self._ops(context).list_dir(request.path)
            for batch in _batches(entries, lambda entry: entry.name):
                wire = [pb.DirEntry(name=e.name, kind=kind_to_wire(e.kind)) for e in batch]
                await context.write(pb.DirEntries(entries=wire))

    async def Remove(
        self, request: pb.RemoveRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.Empty:
        async with CallScope(context, "remove", request.path):
            await self._ops(context).remove(request.path, recursive=request.recursive)
            return pb.Empty()

    async def Rename(
        self, request: pb.RenameRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.Empty:
        async with CallScope(context, "rename", request.source):
            await self._ops(context).rename(request.source, request.destination)
            return pb.Empty()

    # -- find and search -----------------------------------------------------------------------

    async def Glob(
        self, request: pb.GlobRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        async with CallScope(context, "glob", request.cwd):
            found = await self._ops(context).glob(
                request.pattern, request.cwd, ignore=list(request.ignore), limit=request.limit
            )
            for batch in _batches(found):
                await context.write(pb.Names(names=batch))

    async def Search(
        self, request: pb.SearchRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        async with CallScope(context, "search", request.path):
            matches = self._ops(context).search(
                request.pattern,
                request.path,
                glob=request.glob if request.HasField("glob") else None,
                ignore_case=request.ignore_case,
                literal=request.literal,
                limit=request.limit,
            )
            try:
                async for match in matches:
                    wire = pb.SearchMatch(path=match.path, line_number=match.line_number)
                    if match.line_text is not None:
                        wire.line_text = match.line_text
                    await context.write(wire)
            finally:
                aclose = getattr(matches, "aclose", None)
                if aclose is not None:
                    await self._finish(aclose())

    # -- commands ------------------------------------------------------------------------------

    async def Exec(
        self, request_iterator: object, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        async with CallScope(context, "exec", None):
            first = await _read(context, "exec")
            if first is grpc.aio.EOF or first.WhichOneof("input") != "start":
                raise InvalidArgument("exec", None, "the first message must be `start`")
            controller = AbortController()
            watcher = asyncio.create_task(_watch_abort(context, controller))
            try:
                await self._run(first.start, context, controller)
            finally:
                watcher.cancel()

    async def Run(
        self, request: pb.ExecRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        async with CallScope(context, "exec", None):
            controller = AbortController()
            if not request.abort_id:
                await self._run(request, context, controller)
                return
            key = (current_principal.get(), request.abort_id)
            with self._runs.running(key, controller, request.cwd):
                await self._run(request, context, controller)

    async def AbortRun(
        self, request: pb.AbortRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.Empty:
        async with CallScope(context, "abort_exec", None):
            if not request.abort_id:
                raise InvalidArgument("abort_exec", None, "`abort_id` must not be empty")
            self._runs.abort((current_principal.get(), request.abort_id))
            return pb.Empty()

    async def _run(
        self,
        request: pb.ExecRequest,
        context: grpc.aio.ServicerContext[Any, Any],
        controller: AbortController,
    ) -> None:
        """Run ``request`` on the backend, streaming its output, then write the exit event."""
        if request.shell == pb.SHELL_POWERSHELL:
            runner: Any = self._ops(context).powershell
        elif request.shell in (pb.SHELL_UNSPECIFIED, pb.SHELL_BASH):
            runner = self._ops(context)
        else:
            raise InvalidArgument("exec", request.cwd, f"unknown shell {request.shell}")
        timeout = _exec_timeout(request)
        on_data = _Output(context)
        self._running.add(controller)
        try:
            result = await runner.exec(
                request.command,
                request.cwd,
                on_data=on_data,
                signal=controller.signal,
                timeout=timeout,
                env=dict(request.env) if request.env else None,
            )
        finally:
            self._running.discard(controller)
        reason = result.kill_reason
        if reason is KillReason.ABORTED and controller.signal.reason is _SHUTDOWN:
            reason = KillReason.SHUTDOWN
        end = pb.ExecExit(kill_reason=kill_reason_to_wire(reason))
        if result.exit_code is not None:
            end.exit_code = result.exit_code
        await on_data.drain()
        await context.write(pb.ExecEvent(exit=end))


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


class _Output:
    """The ``on_data`` of a command: its output, written in order by one writer task.

    The writer, not the command's producer, does the writes: when the backend cancels its
    producer (a kill), a write is never cut halfway (that would make the next write, the exit
    event, fail). Output that arrives while a write is in flight is merged into the next event,
    up to a chunk, so a command writing in small pieces costs few events. The producer waits
    while :data:`OUTPUT_BUFFER` bytes are pending (backpressure); a failed write is raised by
    the next call or by :meth:`drain`.
    """

    __slots__ = ("_closed", "_context", "_more", "_pending", "_room", "_size", "_writer")

    def __init__(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        self._context = context
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
                    event = pb.ExecEvent(output=self._take(OUTPUT_EVENT_BYTES))
                    self._room.set()
                    await self._context.write(event)
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


async def _watch_abort(
    context: grpc.aio.ServicerContext[Any, Any], controller: AbortController
) -> None:
    """Abort the command when the client sends ``abort``; anything else is ignored."""
    try:
        while True:
            message = await context.read()
            if message is grpc.aio.EOF:
                return
            if not isinstance(message, Undecodable) and message.WhichOneof("input") == "abort":
                controller.abort("client")
                return
    except Exception:  # the call ended under us: nothing left to abort
        return
