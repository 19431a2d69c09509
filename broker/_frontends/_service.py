"""The Broker service's calls over any :class:`operations.Backend`, transport-neutral.

Each call is a translation: wire request -> backend call -> wire responses. A transport supplies a
:class:`Call` (send a response message, receive the client's further messages) and turns an
:class:`~operations.OpsError` raised here into its own error status. The SSH subsystem drives
these directly; the method names and messages are those of ``service Broker`` in the proto.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import metadata
from typing import Final, Protocol, TypeVar

from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage
from opsbroker.v1 import broker_pb2 as pb
from opsbroker.v1.codec import (
    CHUNK_BYTES,
    batches,
    capabilities_to_wire,
    chunks,
    entry_to_wire,
    exit_to_wire,
    match_to_wire,
    stat_to_wire,
)

from operations import (
    AbortController,
    Backend,
    ExecResult,
    InvalidArgument,
    KillReason,
    TooLarge,
    read_chunks,
    read_small,
    write_chunks,
)

from ._runs import Runs

__all__ = ["DEFAULT_MAX_UPLOAD_BYTES", "METHODS", "Call", "Service"]

M = TypeVar("M", bound=ProtoMessage)

SHUTDOWN: Final = object()
"""The abort reason of commands killed because the broker stops (reported as ``SHUTDOWN``)."""

DEFAULT_MAX_UPLOAD_BYTES: Final = 1024 * 1024 * 1024
"""Most bytes one WriteFile may stream in (the core streams to a temp file, but a backend without
``write_chunks`` buffers the whole file before its atomic write)."""


class Call(Protocol):
    """What a transport offers one running call."""

    async def send(self, message: ProtoMessage) -> None:
        """Send one response message (waits while the peer is not reading: backpressure)."""
        ...

    async def receive(self) -> bytes | None:
        """The next serialized request message from the client, or ``None`` at end of input."""
        ...


def parse(cls: type[M], data: bytes, op: str) -> M:
    """Deserialize a request message; a malformed one is the caller's InvalidArgument."""
    message = cls()
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise InvalidArgument(op, None, f"malformed {cls.__name__} message: {exc}") from None
    return message


try:
    _VERSION = metadata.version("opsbroker")
except metadata.PackageNotFoundError:  # running from a source tree
    _VERSION = "0+unknown"


class Service:
    """The calls of ``service Broker``, served by ``backend``.

    Args:
        backend: where the work happens (the broker core, or any Operations backend).
        max_upload_bytes: the most bytes a WriteFile may stream in before it is refused.
        read_chunk_bytes: the size of ReadFile's pieces, at most ``CHUNK_BYTES`` (a transport
            picks the size whose messages fit its packets).
    """

    def __init__(
        self,
        backend: Backend,
        *,
        max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
        read_chunk_bytes: int = CHUNK_BYTES,
    ):
        if not 0 < read_chunk_bytes <= CHUNK_BYTES:
            raise ValueError(
                f"read_chunk_bytes must be in 1..{CHUNK_BYTES}, got {read_chunk_bytes}"
            )
        self.backend = backend
        self.max_upload_bytes = max_upload_bytes
        self.read_chunk_bytes = read_chunk_bytes
        self._running: set[AbortController] = set()
        self._runs: Runs[str] = Runs()  # Run calls by abort_id (one connection, one principal)

    def kill_running(self) -> int:
        """Abort every running command (the broker stops); their callers see ``SHUTDOWN``."""
        running = list(self._running)
        for controller in running:
            controller.abort(SHUTDOWN)
        return len(running)

    async def Capabilities(self, request: bytes, call: Call) -> None:
        describe = getattr(self.backend, "capabilities", None)
        info = describe() if callable(describe) else {}
        await call.send(capabilities_to_wire(_VERSION, self.backend.root, info))

    async def ReadFile(self, request: bytes, call: Call) -> None:
        path = parse(pb.PathRequest, request, "read_file").path
        async for chunk in read_chunks(self.backend, path, self.read_chunk_bytes):
            await call.send(pb.Chunk(data=chunk))

    async def ReadSmallFile(self, request: bytes, call: Call) -> None:
        path = parse(pb.PathRequest, request, "read_file").path
        data = await read_small(self.backend, path, CHUNK_BYTES)
        await call.send(pb.SmallFile(data=data or b"", complete=data is not None))

    async def Access(self, request: bytes, call: Call) -> None:
        req = parse(pb.AccessRequest, request, "access")
        await self.backend.access(req.path, writable=req.writable)
        await call.send(pb.Empty())

    async def DetectImageMimeType(self, request: bytes, call: Call) -> None:
        path = parse(pb.PathRequest, request, "detect_image_mime_type").path
        mime = await self.backend.detect_image_mime_type(path)
        await call.send(pb.MimeTypeReply(mime_type=mime or ""))

    async def WriteFile(self, request: bytes, call: Call) -> None:
        first = parse(pb.WriteFileRequest, request, "write_file")
        path = first.path
        received = 0

        async def pieces() -> AsyncIterator[bytes]:
            nonlocal received
            data: bytes | None = first.data
            while data is not None:
                received += len(data)
                if received > self.max_upload_bytes:
                    raise TooLarge(
                        "write_file", path, f"upload exceeds {self.max_upload_bytes} bytes"
                    )
                yield data
                more = await call.receive()
                data = None if more is None else parse(pb.WriteFileRequest, more, "write_file").data
            if first.HasField("size") and first.size != received:
                raise InvalidArgument(
                    "write_file", path, f"announced {first.size} bytes, received {received}"
                )

        await write_chunks(self.backend, path, pieces())
        await call.send(pb.Empty())

    async def Mkdir(self, request: bytes, call: Call) -> None:
        await self.backend.mkdir(parse(pb.PathRequest, request, "mkdir").path)
        await call.send(pb.Empty())

    async def Exists(self, request: bytes, call: Call) -> None:
        path = parse(pb.PathRequest, request, "exists").path
        await call.send(pb.BoolReply(value=await self.backend.exists(path)))

    async def Stat(self, request: bytes, call: Call) -> None:
        path = parse(pb.PathRequest, request, "stat").path
        await call.send(stat_to_wire(await self.backend.stat(path)))

    async def Lstat(self, request: bytes, call: Call) -> None:
        path = parse(pb.PathRequest, request, "lstat").path
        await call.send(stat_to_wire(await self.backend.lstat(path)))

    async def IsDirectory(self, request: bytes, call: Call) -> None:
        path = parse(pb.PathRequest, request, "is_directory").path
        await call.send(pb.BoolReply(value=await self.backend.is_directory(path)))

    async def Readdir(self, request: bytes, call: Call) -> None:
        names = await self.backend.readdir(parse(pb.PathRequest, request, "readdir").path)
        for batch in batches(names):
            await call.send(pb.Names(names=batch))

    async def ListDir(self, request: bytes, call: Call) -> None:
        entries = await self.backend.list_dir(parse(pb.PathRequest, request, "list_dir").path)
        for batch in batches(entries, lambda entry: entry.name):
            await call.send(pb.DirEntries(entries=[entry_to_wire(e) for e in batch]))

    async def Remove(self, request: bytes, call: Call) -> None:
        req = parse(pb.RemoveRequest, request, "remove")
        await self.backend.remove(req.path, recursive=req.recursive)
        await call.send(pb.Empty())

    async def Rename(self, request: bytes, call: Call) -> None:
        req = parse(pb.RenameRequest, request, "rename")
        await self.backend.rename(req.source, req.destination)
        await call.send(pb.Empty())

    async def Glob(self, request: bytes, call: Call) -> None:
        req = parse(pb.GlobRequest, request, "glob")
        paths = await self.backend.glob(
            req.pattern, req.cwd, ignore=list(req.ignore), limit=req.limit
        )
        for batch in batches(paths):
            await call.send(pb.Names(names=batch))

    async def Search(self, request: bytes, call: Call) -> None:
        req = parse(pb.SearchRequest, request, "search")
        matches = self.backend.search(
            req.pattern,
            req.path,
            glob=req.glob if req.HasField("glob") else None,
            ignore_case=req.ignore_case,
            literal=req.literal,
            limit=req.limit,
        )
        try:
            async for match in matches:
                await call.send(match_to_wire(match))
        finally:
            aclose = getattr(matches, "aclose", None)
            if aclose is not None:
                await aclose()

    async def Exec(self, request: bytes, call: Call) -> None:
        """Run a command; a later ``ExecInput.abort`` aborts it (the call still ends normally).

        **Cancellation:** cancelling the call cancels the backend's exec, which kills the tree
        before the cancellation propagates.
        """
        first = parse(pb.ExecInput, request, "exec")
        if first.WhichOneof("input") != "start":
            raise InvalidArgument("exec", None, "the first ExecInput must be 'start'")
        req = first.start
        controller = AbortController()

        async def watch_input() -> None:
            while (more := await call.receive()) is not None:
                if parse(pb.ExecInput, more, "exec").WhichOneof("input") == "abort":
                    controller.abort("client")

        watcher = asyncio.create_task(watch_input())
        try:
            await self._run(req, call, controller)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, InvalidArgument):
                await watcher

    async def Run(self, request: bytes, call: Call) -> None:
        """Exec in one request; ``AbortRun`` with the request's ``abort_id`` aborts it."""
        req = parse(pb.ExecRequest, request, "exec")
        controller = AbortController()
        key = req.abort_id
        if not key:
            await self._run(req, call, controller)
            return
        with self._runs.running(key, controller, req.cwd):
            await self._run(req, call, controller)

    async def AbortRun(self, request: bytes, call: Call) -> None:
        key = parse(pb.AbortRunRequest, request, "abort_exec").abort_id
        if not key:
            raise InvalidArgument("abort_exec", None, "`abort_id` must not be empty")
        self._runs.abort(key)
        await call.send(pb.Empty())

    async def _run(self, req: pb.ExecRequest, call: Call, controller: AbortController) -> None:
        ops = self.backend.powershell if req.shell == pb.SHELL_POWERSHELL else self.backend

        async def on_data(data: bytes) -> None:
            for chunk in chunks(data):
                await call.send(pb.ExecEvent(output=chunk))

        self._running.add(controller)
        try:
            result = await ops.exec(
                req.command,
                req.cwd,
                on_data=on_data,
                signal=controller.signal,
                timeout=req.timeout if req.HasField("timeout") else None,
                env=dict(req.env) if req.env else None,
            )
        finally:
            self._running.discard(controller)
        if result.kill_reason is KillReason.ABORTED and controller.signal.reason is SHUTDOWN:
            result = ExecResult(None, KillReason.SHUTDOWN)
        await call.send(pb.ExecEvent(exit=exit_to_wire(result)))


Handler = Callable[[Service, bytes, Call], Awaitable[None]]

METHODS: Final[dict[str, Handler]] = {
    name: getattr(Service, name)
    for name in pb.DESCRIPTOR.services_by_name["Broker"].methods_by_name
}
"""Every method of ``service Broker``, by name: the dispatch table of a transport."""
