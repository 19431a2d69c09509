"""The SSH backend: every Operations member over a broker's ``opsbroker`` subsystem.

One SSH connection carries every call. Each call runs on its own channel of the subsystem, so
calls run concurrently and a call's cancellation is local to its channel; a channel whose call
is over goes back to a small pool and carries the next call (one round trip per call instead of
three). The messages are the gRPC service's, framed by :mod:`opsbroker.v1.sshframe`; the calls
are :class:`~._frames.FrameClient`'s, as over gRPC.

**Cancellation:** cancelling the awaiting task (or closing a ``search`` iterator early) sends a
``CANCEL`` frame and waits, at most :data:`CANCEL_WAIT_S`, for the broker to end the call (for
``exec``: after the tree is killed); then the cancellation propagates. An ``AbortSignal`` aborts
an ``exec`` through ``AbortRun``: the command is killed and ``exec`` returns its result with
``kill_reason=ABORTED``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import os
import urllib.parse
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, Self, TypeVar

import asyncssh
from google.protobuf.message import Message as ProtoMessage
from opsbroker import malloc
from opsbroker.sshpackets import lean_packets
from opsbroker.v1 import broker_pb2 as pb
from opsbroker.v1.codec import (
    capabilities_from_wire,
    chunk_data_view,
    entry_from_wire,
    match_from_wire,
    stat_from_wire,
)
from opsbroker.v1.sshframe import (
    DEFAULT_MAX_FRAME_SIZE,
    HEADER_BYTES,
    SUBSYSTEM,
    bytes_field_prefix,
)

from operations import (
    AbortSignal,
    DirEntry,
    ExecResult,
    FileStat,
    InvalidArgument,
    KillReason,
    OnData,
    PowerShellOperations,
    SearchMatch,
    ShellExec,
    Unauthenticated,
    Unavailable,
    check_mode,
    check_timeout,
)

from ._frames import FrameCall, FrameClient, FrameStream
from .processes import RemoteProcesses

__all__ = ["CANCEL_WAIT_S", "WRITE_CHUNK_BYTES", "SSHBackend", "open_ssh_url"]

M = TypeVar("M", bound=ProtoMessage)

CANCEL_WAIT_S: Final = 10.0
"""How long a cancelled call waits for the broker to confirm (kill grace 5 s, plus margin)."""

PREFERRED_CIPHERS: Final = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes128-ctr",
    "aes256-ctr",
)
"""Cipher preference: AES-GCM is one hardware-accelerated call per packet (asyncssh's default,
ChaCha20-Poly1305, costs about 40% more per call here). Override with ``encryption_algs=``."""

CHANNEL_WINDOW: Final = 8 * 1024 * 1024
"""Bytes the broker may send on a channel before we acknowledge: room for a fast stream."""

CHANNEL_MAX_PACKET: Final = 128 * 1024
"""Largest SSH packet we accept: fewer packets per MiB than OpenSSH's 32 KiB (the broker accepts
as much), and small enough that an untuned glibc reuses their buffers: at 256 KiB each was faulted
in afresh, and 64 MiB of output cost this side about 60% more CPU."""

WRITE_CHUNK_BYTES: Final = CHANNEL_MAX_PACKET - HEADER_BYTES - 4
"""WriteFile's pieces after the first: framed as a MESSAGE (a tag and a 3-byte length added),
each fills one SSH packet of the broker's size exactly, where a piece a few bytes longer
spills into a nearly empty packet more (15% more CPU per write)."""


_OUTPUT_FIELD: Final = pb.ExecEvent.DESCRIPTOR.fields_by_name["output"].number
_DATA_FIELD: Final = pb.WriteFileRequest.DESCRIPTOR.fields_by_name["data"].number


class _ChannelSession(FrameStream, asyncssh.SSHClientSession[bytes]):
    """One subsystem channel: a :class:`~._frames.FrameStream` fed by asyncssh."""

    what = "SSH channel"

    def __init__(self, max_frame_size: int) -> None:
        super().__init__(max_frame_size)
        self.chan: asyncssh.SSHClientChannel[bytes] | None = None

    def connection_made(self, chan: asyncssh.SSHClientChannel[bytes]) -> None:
        self.chan = chan

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        self.received(data)

    def eof_received(self) -> bool:
        self.fail(ConnectionResetError("the broker closed the channel"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(exc or ConnectionResetError("the channel was closed"))
        self.writable.set()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def writelines(self, parts: list[bytes | memoryview]) -> None:
        assert self.chan is not None
        self.chan.writelines(parts)  # asyncssh joins them: the one copy before its packets

    def close(self) -> None:
        self.broken = True
        if self.chan is not None:
            self.chan.close()


_FIXED_OPTIONS: Final[Mapping[str, object]] = {
    "agent_path": None,
    "password": None,
    "kbdint_auth": False,
    "encoding": None,
}
"""asyncssh options the backend sets itself: keys are its only login, and it speaks bytes."""

_ASYNCSSH_OPTIONS: Final = frozenset(
    inspect.signature(asyncssh.SSHClientConnectionOptions.prepare).parameters
) - {"self", "host", "port", "username", "client_keys", "known_hosts", *_FIXED_OPTIONS}
"""The other ``asyncssh.connect`` options a caller may pass through (``connect_timeout``,
``keepalive_interval``, ``config``, ...): asyncssh's own list, so that a misspelt name is an
error here, not a ``TypeError`` at the first call."""


class SSHBackend:
    """A broker reached over SSH; implements every Operations interface.

    Create it with :func:`agent_side.connect` (``ssh://user@host:port``) or directly, then use it
    as an async context manager (or call :meth:`connect` first): the connection is opened, and
    ``root`` learned from the broker, on entry.

    Args:
        host, port, username: where the broker listens and as whom to log in.
        client_keys: private keys (paths or key objects) to authenticate with.
        known_hosts: the known_hosts file (or asyncssh's other forms) that must vouch for the
            broker's host key; ``None`` disables host key checking (tests only).
        max_frame_size: the largest frame accepted from the broker.
        tune_allocator: set glibc's allocator thresholds for large transfers when connecting
            (:func:`opsbroker.malloc.tune_allocator`). Off by default: the setting is process-wide,
            the embedding application's to make; on, large transfers fault less here.
        options: more ``asyncssh.connect`` options (a name it does not know is refused).
    """

    def __init__(
        self,
        host: str,
        port: int = 22,
        *,
        username: str | None = None,
        client_keys: Any = (),
        known_hosts: Any = (),
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        tune_allocator: bool = False,
        **options: Any,
    ) -> None:
        self._where = where = f"ssh://{host}:{port}"
        if not isinstance(tune_allocator, bool):
            raise InvalidArgument(
                "connect", where, f"tune_allocator must be True or False, not {tune_allocator!r}"
            )
        if type(max_frame_size) is not int or max_frame_size <= 0:
            raise InvalidArgument(
                "connect", where, f"max_frame_size must be a positive int, not {max_frame_size!r}"
            )
        if fixed := sorted(_FIXED_OPTIONS.keys() & options):
            raise InvalidArgument(
                "connect",
                where,
                f"{', '.join(fixed)}: set by the SSH backend itself, which logs in with keys only "
                "(no agent, password or prompt) and speaks bytes",
            )
        if unknown := sorted(set(options) - _ASYNCSSH_OPTIONS):
            raise InvalidArgument(
                "connect",
                where,
                f"unknown option(s) {', '.join(unknown)}: the SSH backend takes client_keys, "
                "known_hosts, max_frame_size, tune_allocator and asyncssh's connection options",
            )
        self._host = host
        self._port = port
        self._username = username
        self._client_keys = client_keys
        self._known_hosts = known_hosts
        self._max_frame_size = max_frame_size
        self._tune_allocator = tune_allocator
        self._options = options
        self._conn: asyncssh.SSHClientConnection | None = None
        self._connecting: asyncio.Lock | None = None
        self._capabilities: pb.CapabilitiesReply | None = None
        self._frames = FrameClient(self._channel, CANCEL_WAIT_S)
        self._closed = False
        self.powershell: PowerShellOperations = ShellExec(
            lambda command, cwd, on_data, signal, timeout, env: self.exec(
                command,
                cwd,
                on_data=on_data,
                signal=signal,
                timeout=timeout,
                env=env,
                shell=pb.SHELL_POWERSHELL,
            )
        )

    # -- connection --

    @property
    def root(self) -> str:
        return self._reply("root").root

    def _reply(self, op: str) -> pb.CapabilitiesReply:
        if self._capabilities is None:
            raise Unavailable(
                op, None, "not connected yet: use 'async with' or await connect() first"
            )
        return self._capabilities

    def capabilities(self) -> dict[str, Any]:
        """What the broker reported at connect, in the shape of ``Broker.capabilities()``:
        resolver, search engine, tracking, sandbox, limits (``None``: no limit).

        Raises:
            Unavailable: not connected yet.
        """
        return capabilities_from_wire(self._reply("capabilities"))

    @property
    def version(self) -> str:
        """The broker's opsbroker version (known once connected)."""
        return self._reply("version").version

    async def connect(self) -> None:
        """Open the SSH connection and fetch the broker's capabilities (``root`` among them).
        Idempotent."""
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._conn is not None:
                return
            if self._closed:
                raise Unavailable("connect", None, "the backend is closed")
            where = self._where
            if self._tune_allocator:
                malloc.tune_allocator()
            try:  # asyncssh checks the options' values (and reads key files) here
                options = await asyncssh.SSHClientConnectionOptions.construct(
                    None,
                    host=self._host,
                    port=self._port,
                    username=self._username,
                    client_keys=self._client_keys,
                    known_hosts=self._known_hosts,
                    **_FIXED_OPTIONS,
                    **{"encryption_algs": PREFERRED_CIPHERS, **self._options},
                )
            except (TypeError, ValueError, OSError) as exc:
                raise InvalidArgument(
                    "connect", where, f"cannot use the SSH options: {exc}"
                ) from None
            try:
                self._conn = await asyncssh.connect(self._host, self._port, options=options)
            except asyncssh.HostKeyNotVerifiable as exc:
                raise Unauthenticated("connect", where, f"host key not trusted: {exc}") from None
            except asyncssh.PermissionDenied as exc:
                raise Unauthenticated("connect", where, f"key refused: {exc}") from None
            except (OSError, asyncssh.Error) as exc:
                raise Unavailable("connect", where, f"cannot reach the broker: {exc}") from None
            lean_packets(self._conn)  # asyncssh's packets, without its needless copies
            self._capabilities = await self._unary(
                "Capabilities", pb.CapabilitiesRequest(), pb.CapabilitiesReply
            )

    async def aclose(self) -> None:
        """Close the connection; the broker cancels whatever is still running. Idempotent."""
        self._closed = True
        conn, self._conn = self._conn, None
        self._frames.close()
        if conn is not None:
            conn.close()
            await conn.wait_closed()

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- calls --

    async def _channel(self, op: str, path: str | None) -> _ChannelSession:
        """A new subsystem channel (the pool in ``_frames`` reuses it for later calls)."""
        if self._conn is None:
            if self._closed:
                raise Unavailable(op, path, "the SSH backend is closed")
            await self.connect()
        assert self._conn is not None
        try:
            _, created = await self._conn.create_session(
                lambda: _ChannelSession(self._max_frame_size),
                subsystem=SUBSYSTEM,
                encoding=None,
                window=CHANNEL_WINDOW,
                max_pktsize=CHANNEL_MAX_PACKET,
            )
        except (OSError, asyncssh.Error) as exc:
            raise Unavailable(op, path, f"cannot open an SSH channel: {exc}") from None
        assert isinstance(created, _ChannelSession)
        return created

    def _call(
        self, method: str, request: ProtoMessage, path: str | None, *, streaming_input: bool = False
    ) -> contextlib.AbstractAsyncContextManager[FrameCall]:
        return self._frames.call(method, request, path, streaming_input=streaming_input)

    async def _unary(
        self, method: str, request: ProtoMessage, reply: type[M], path: str | None = None
    ) -> M:
        return await self._frames.unary(method, request, reply, path)

    def _stream(self, method: str, request: ProtoMessage, path: str | None) -> AsyncIterator[bytes]:
        return self._frames.stream(method, request, path)

    @property
    def processes(self) -> RemoteProcesses:
        """Processes that outlive a call, kept by the broker (:class:`~operations.ProcessOperations`)."""
        return RemoteProcesses(self._process_call, self._process_stream)

    async def _process_call(
        self,
        method: str,
        request: ProtoMessage,
        reply: type[M],
        path: str | None,
        *,
        long: bool = False,
    ) -> M:
        return await self._unary(method, request, reply, path)

    async def _process_stream(
        self, method: str, request: ProtoMessage, reply: type[M], path: str | None
    ) -> AsyncIterator[M]:
        async for data in self._stream(method, request, path):
            message = reply()
            message.ParseFromString(data)
            yield message

    # -- ReadOperations, WriteOperations, EditOperations --

    async def read_file(self, path: str) -> bytes:
        path = _text("read_file", path)
        # As in the gRPC backend: each piece is copied once, from the received message into the
        # buffer whose bytes are returned (getvalue() hands them over without another copy), and
        # received messages are released as they come instead of being held until a final join.
        content = io.BytesIO()
        async with self._call("ReadFile", pb.PathRequest(path=path), path) as call:
            while (data := await call.receive()) is not None:
                content.write(chunk_data_view(data))
        return content.getvalue()

    async def access(self, path: str, *, writable: bool = False) -> None:
        path = _text("access", path)
        await self._unary("Access", pb.AccessRequest(path=path, writable=writable), pb.Empty, path)

    async def detect_image_mime_type(self, path: str) -> str | None:
        path = _text("detect_image_mime_type", path)
        reply = await self._unary(
            "DetectImageMimeType", pb.PathRequest(path=path), pb.MimeTypeReply, path
        )
        return reply.mime_type or None

    async def write_file(self, path: str, content: bytes | str, *, mode: int | None = None) -> None:
        path = _text("write_file", path)
        check_mode(mode, "write_file", path)
        if isinstance(content, str):
            data = _text("write_file", content, what="content").encode("utf-8")
        else:
            data = bytes(content)
        step = WRITE_CHUNK_BYTES
        if len(data) <= step:  # one unary call, as over gRPC
            small = pb.WriteSmallFileRequest(path=path, data=data, mode=mode)
            await self._unary("WriteSmallFile", small, pb.Empty, path)
            return
        first = pb.WriteFileRequest(path=path, data=data[:step], size=len(data), mode=mode)
        async with self._call("WriteFile", first, path, streaming_input=True) as call:
            view = memoryview(data)
            for start in range(step, len(data), step):
                # WriteFileRequest(data=piece), serialized by hand: the piece is copied once,
                # as the channel joins its frame (building the message and serializing it
                # copy it twice more).
                piece = view[start : start + step]
                await call.send_message([bytes_field_prefix(_DATA_FIELD, len(piece)), piece])
            call.end_input()
            await call.receive_one(pb.Empty)

    async def mkdir(self, path: str) -> None:
        path = _text("mkdir", path)
        await self._unary("Mkdir", pb.PathRequest(path=path), pb.Empty, path)

    # -- LsOperations, FindOperations, GrepOperations, FileSystemOperations --

    async def exists(self, path: str) -> bool:
        path = _text("exists", path)
        return (await self._unary("Exists", pb.PathRequest(path=path), pb.BoolReply, path)).value

    async def stat(self, path: str) -> FileStat:
        path = _text("stat", path)
        return stat_from_wire(
            await self._unary("Stat", pb.PathRequest(path=path), pb.FileStat, path)
        )

    async def lstat(self, path: str) -> FileStat:
        path = _text("lstat", path)
        reply = await self._unary("Lstat", pb.PathRequest(path=path), pb.FileStat, path)
        return stat_from_wire(reply)

    async def is_directory(self, path: str) -> bool:
        path = _text("is_directory", path)
        request = pb.PathRequest(path=path)
        return (await self._unary("IsDirectory", request, pb.BoolReply, path)).value

    async def readdir(self, path: str) -> list[str]:
        path = _text("readdir", path)
        names: list[str] = []
        async for data in self._stream("Readdir", pb.PathRequest(path=path), path):
            batch = pb.Names()
            batch.ParseFromString(data)
            names.extend(batch.names)
        return names

    async def list_dir(self, path: str) -> list[DirEntry]:
        path = _text("list_dir", path)
        entries: list[DirEntry] = []
        async for data in self._stream("ListDir", pb.PathRequest(path=path), path):
            batch = pb.DirEntries()
            batch.ParseFromString(data)
            entries.extend(entry_from_wire(e) for e in batch.entries)
        return entries

    async def glob(
        self, pattern: str, cwd: str, *, ignore: Sequence[str] = (), limit: int = 1000
    ) -> list[str]:
        cwd = _text("glob", cwd)
        pattern = _text("glob", pattern, what="pattern")
        request = pb.GlobRequest(pattern=pattern, cwd=cwd, ignore=list(ignore), limit=limit)
        paths: list[str] = []
        async for data in self._stream("Glob", request, cwd):
            batch = pb.Names()
            batch.ParseFromString(data)
            paths.extend(batch.names)
        return paths

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
        path = _text("search", path)
        pattern = _text("search", pattern, what="pattern")
        request = pb.SearchRequest(
            pattern=pattern,
            path=path,
            glob=glob,
            ignore_case=ignore_case,
            literal=literal,
            limit=limit,
        )
        async with self._call("Search", request, path) as call:
            while (data := await call.receive()) is not None:
                match = pb.SearchMatch()
                match.ParseFromString(data)
                yield match_from_wire(match)

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        path = _text("remove", path)
        request = pb.RemoveRequest(path=path, recursive=recursive)
        await self._unary("Remove", request, pb.Empty, path)

    async def rename(self, source: str, destination: str) -> None:
        source = _text("rename", source)
        destination = _text("rename", destination)
        request = pb.RenameRequest(source=source, destination=destination)
        await self._unary("Rename", request, pb.Empty, source)

    # -- BashOperations --

    async def exec(
        self,
        command: str,
        cwd: str,
        *,
        on_data: OnData,
        signal: AbortSignal | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        shell: pb.Shell = pb.SHELL_BASH,
    ) -> ExecResult:
        check_timeout(timeout)
        cwd = _text("exec", cwd)
        command = _text("exec", command, what="command")
        if signal is not None and signal.aborted:
            return ExecResult(None, KillReason.ABORTED)  # aborted before it started: run nothing
        # One request (Run), as on every transport: an abort travels as an AbortRun naming the
        # command by this id, on another channel, and the Run call then reports the kill.
        abort_id = os.urandom(16).hex()
        start = pb.ExecRequest(
            command=command, cwd=cwd, shell=shell, timeout=timeout, env=env, abort_id=abort_id
        )
        return await self._frames.exec(start, on_data, signal)


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _text(op: str, value: object, *, what: str = "path") -> str:
    """``value`` if it can cross the wire as text (a ``str`` that is valid UTF-8), else
    InvalidArgument, as the broker would say."""
    if not isinstance(value, str):
        shown = os.fsdecode(value) if isinstance(value, bytes) else repr(value)
        raise InvalidArgument(op, shown, f"{what} must be a str, got {type(value).__name__}")
    if not _is_utf8(value):
        raise InvalidArgument(op, value, f"{what} is not valid UTF-8 text")
    return value


def open_ssh_url(parts: urllib.parse.SplitResult, options: dict[str, Any]) -> SSHBackend:
    """``connect()``'s factory for ``ssh://user@host:port``."""
    if not parts.hostname:
        raise InvalidArgument("connect", parts.geturl(), "an ssh:// URL needs a host")
    username = urllib.parse.unquote(parts.username) if parts.username else None
    if username is None:
        username = os.environ.get("USER") or "opsbroker"
    options.setdefault("username", username)
    return SSHBackend(parts.hostname, parts.port or 22, **options)
