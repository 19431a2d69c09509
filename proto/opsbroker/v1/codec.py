"""Conversions between the v1 wire messages and ``operations`` values, for every transport.

The gRPC front-end and client, and the SSH ones after them, all translate through these functions,
so a value means the same thing whichever way it travelled. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from operations import (
    ERROR_TYPES,
    DirEntry,
    ExecResult,
    FileKind,
    FileStat,
    KillReason,
    OpsError,
    PolicyDenied,
    ProcessInfo,
    ProcessOutput,
    ProcessState,
    PtySize,
    SearchMatch,
    Stream,
)
from operations import error_from_code as _error_from_code

from . import broker_pb2 as pb

__all__ = [
    "CHUNK_BYTES",
    "ERROR_METADATA_KEY",
    "LIMIT_KEYS",
    "LIST_BATCH_BYTES",
    "MAX_MESSAGE_BYTES",
    "batches",
    "capabilities_from_wire",
    "capabilities_to_wire",
    "chunk_data_view",
    "entry_from_wire",
    "entry_to_wire",
    "error_from_wire",
    "error_to_wire",
    "exit_from_wire",
    "exit_to_wire",
    "kill_reason_from_wire",
    "kill_reason_to_wire",
    "kind_from_wire",
    "kind_to_wire",
    "match_from_wire",
    "match_to_wire",
    "output_from_wire",
    "output_to_wire",
    "passing_bytes",
    "process_from_wire",
    "process_to_wire",
    "pty_from_wire",
    "pty_to_wire",
    "stat_from_wire",
    "stat_to_wire",
]

CHUNK_BYTES = 256 * 1024  # payload per message: 64 KiB streamed at half the rate; far below caps
LIST_BATCH_BYTES = 256 * 1024  # names per readdir/glob batch, by size: lists never hit a cap
ERROR_METADATA_KEY = "opsbroker-error-bin"  # gRPC trailing metadata holding an ErrorDetail
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # largest reply on any transport: a match holds a whole line

T = TypeVar("T")

_KIND_TO_WIRE: dict[FileKind, pb.FileKind] = {
    FileKind.FILE: pb.FILE_KIND_FILE,
    FileKind.DIRECTORY: pb.FILE_KIND_DIRECTORY,
    FileKind.SYMLINK: pb.FILE_KIND_SYMLINK,
    FileKind.OTHER: pb.FILE_KIND_OTHER,
}
_KIND_FROM_WIRE = {wire: kind for kind, wire in _KIND_TO_WIRE.items()}

_KILL_TO_WIRE: dict[KillReason, pb.KillReason] = {
    KillReason.TIMEOUT: pb.KILL_REASON_TIMEOUT,
    KillReason.ABORTED: pb.KILL_REASON_ABORTED,
    KillReason.OUTPUT_LIMIT: pb.KILL_REASON_OUTPUT_LIMIT,
    KillReason.SHUTDOWN: pb.KILL_REASON_SHUTDOWN,
    KillReason.KILLED: pb.KILL_REASON_KILLED,
    KillReason.IDLE_TIMEOUT: pb.KILL_REASON_IDLE_TIMEOUT,
}
_KILL_FROM_WIRE = {wire: reason for reason, wire in _KILL_TO_WIRE.items()}


def kind_to_wire(kind: FileKind) -> pb.FileKind:
    return _KIND_TO_WIRE[kind]


def kind_from_wire(kind: pb.FileKind) -> FileKind:
    """An unknown or unset kind (a newer broker) reads as ``OTHER``."""
    return _KIND_FROM_WIRE.get(kind, FileKind.OTHER)


def kill_reason_to_wire(reason: KillReason | None) -> pb.KillReason:
    return pb.KILL_REASON_UNSPECIFIED if reason is None else _KILL_TO_WIRE[reason]


def kill_reason_from_wire(reason: pb.KillReason) -> KillReason | None:
    """``UNSPECIFIED`` means "not killed"; an unknown value (a newer broker) reads as ``ABORTED``."""
    if reason == pb.KILL_REASON_UNSPECIFIED:
        return None
    return _KILL_FROM_WIRE.get(reason, KillReason.ABORTED)


def stat_to_wire(stat: FileStat) -> pb.FileStat:
    return pb.FileStat(
        kind=_KIND_TO_WIRE[stat.kind], size=stat.size, mode=stat.mode, mtime=stat.mtime
    )


def stat_from_wire(stat: pb.FileStat) -> FileStat:
    return FileStat(
        kind=kind_from_wire(stat.kind), size=stat.size, mode=stat.mode, mtime=stat.mtime
    )


def error_to_wire(error: OpsError) -> pb.ErrorDetail:
    """The :class:`ErrorDetail` that rebuilds ``error`` on the other side."""
    detail = pb.ErrorDetail(code=error.code, op=error.op, reason=error.reason)
    if error.path is not None:
        detail.path = error.path
    if isinstance(error, PolicyDenied) and error.rule is not None:
        detail.rule = error.rule
    return detail


def error_from_wire(detail: pb.ErrorDetail) -> OpsError:
    """The same :class:`~operations.OpsError` type, op, path, reason (and rule) that was sent."""
    path = detail.path if detail.HasField("path") else None
    rule = detail.rule if detail.HasField("rule") else None
    if detail.code not in ERROR_TYPES:
        return OpsError(detail.op, path, detail.reason or None)
    return _error_from_code(detail.code, detail.op, path, detail.reason or None, rule=rule)


def passing_bytes(serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """A gRPC serializer that serializes messages and passes one already serialized (``bytes``,
    e.g. a file piece framed by :func:`~opsbroker.v1.sshframe.bytes_field_message` with one copy
    of it, where building the message and serializing it copies it twice) as it is."""

    def serialized(message: Any) -> bytes:
        return message if type(message) is bytes else serialize(message)

    return serialized


def chunk_data_view(raw: bytes) -> memoryview:
    """The ``data`` of a serialized :class:`Chunk` (or ``FrameBytes``, the same layout), as a
    view into ``raw`` (no copy).

    A response deserializer for streams of bytes: the client copies each piece once, into
    whatever it assembles or cuts out of it. A message that is not exactly field 1 (another encoder's layout,
    unknown fields) is parsed in full instead.
    """
    view = memoryview(raw)
    if len(raw) > 1 and raw[0] == 0x0A:  # field 1, length-delimited
        length = shift = 0
        for index in range(1, min(len(raw), 11)):
            byte = raw[index]
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                if index + 1 + length == len(raw):
                    return view[index + 1 :]
                break
    elif not raw:
        return view  # an empty Chunk
    return memoryview(pb.Chunk.FromString(raw).data)


def entry_to_wire(entry: DirEntry) -> pb.DirEntry:
    return pb.DirEntry(name=entry.name, kind=_KIND_TO_WIRE[entry.kind])


def entry_from_wire(entry: pb.DirEntry) -> DirEntry:
    return DirEntry(name=entry.name, kind=kind_from_wire(entry.kind))


def match_to_wire(match: SearchMatch) -> pb.SearchMatch:
    return pb.SearchMatch(path=match.path, line_number=match.line_number, line_text=match.line_text)


def match_from_wire(match: pb.SearchMatch) -> SearchMatch:
    text = match.line_text if match.HasField("line_text") else None
    return SearchMatch(path=match.path, line_number=match.line_number, line_text=text)


def exit_to_wire(result: ExecResult) -> pb.ExecExit:
    return pb.ExecExit(
        exit_code=result.exit_code,
        kill_reason=kill_reason_to_wire(result.kill_reason),
        signal=result.signal,
    )


def exit_from_wire(end: pb.ExecExit) -> ExecResult:
    code = end.exit_code if end.HasField("exit_code") else None
    signal = end.signal if end.HasField("signal") else None
    return ExecResult(
        exit_code=code, kill_reason=kill_reason_from_wire(end.kill_reason), signal=signal
    )


_STATE_TO_WIRE: dict[ProcessState, pb.ProcessState] = {
    ProcessState.RUNNING: pb.PROCESS_STATE_RUNNING,
    ProcessState.EXITED: pb.PROCESS_STATE_EXITED,
    ProcessState.KILLED: pb.PROCESS_STATE_KILLED,
}
_STATE_FROM_WIRE = {wire: state for state, wire in _STATE_TO_WIRE.items()}


def pty_to_wire(size: PtySize) -> pb.PtySize:
    return pb.PtySize(cols=size.cols, rows=size.rows)


def pty_from_wire(size: pb.PtySize) -> PtySize:
    return PtySize(cols=size.cols, rows=size.rows)


def process_to_wire(info: ProcessInfo) -> pb.ProcessInfo:
    wire = pb.ProcessInfo(
        id=info.id,
        command=info.command,
        cwd=info.cwd,
        state=_STATE_TO_WIRE[info.state],
        started_at=info.started_at,
        exit_code=info.exit_code,
        kill_reason=kill_reason_to_wire(info.kill_reason),
        bytes_out=info.bytes_out,
        signal=info.signal,
    )
    if info.pty is not None:
        wire.pty.CopyFrom(pty_to_wire(info.pty))
    return wire


def process_from_wire(wire: pb.ProcessInfo) -> ProcessInfo:
    return ProcessInfo(
        id=wire.id,
        command=wire.command,
        cwd=wire.cwd,
        state=_STATE_FROM_WIRE.get(wire.state, ProcessState.KILLED),
        started_at=wire.started_at,
        pty=pty_from_wire(wire.pty) if wire.HasField("pty") else None,
        exit_code=wire.exit_code if wire.HasField("exit_code") else None,
        kill_reason=kill_reason_from_wire(wire.kill_reason),
        bytes_out=wire.bytes_out,
        signal=wire.signal if wire.HasField("signal") else None,
    )


def output_to_wire(output: ProcessOutput) -> pb.ProcessOutput:
    stream = pb.OUTPUT_STREAM_STDERR if output.stream is Stream.STDERR else pb.OUTPUT_STREAM_STDOUT
    return pb.ProcessOutput(
        offset=output.offset, data=output.data, stream=stream, dropped=output.dropped
    )


def output_from_wire(wire: pb.ProcessOutput) -> ProcessOutput:
    stream = Stream.STDERR if wire.stream == pb.OUTPUT_STREAM_STDERR else Stream.STDOUT
    return ProcessOutput(offset=wire.offset, data=wire.data, stream=stream, dropped=wire.dropped)


def batches(items: Iterable[T], name: Callable[[T], str] = str) -> Iterator[list[T]]:
    """``items`` in lists of about :data:`LIST_BATCH_BYTES`, so no message nears a size cap."""
    batch: list[T] = []
    size = 0
    for item in items:
        batch.append(item)
        size += len(name(item)) + 8
        if size >= LIST_BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


LIMIT_KEYS: tuple[str, ...] = tuple(pb.Limits.DESCRIPTOR.fields_by_name)
"""The keys of a capabilities dict's ``limits``: the fields of ``Limits``, ``None`` for "no limit"."""


def capabilities_to_wire(version: str, root: str, info: Mapping[str, Any]) -> pb.CapabilitiesReply:
    """The Capabilities reply from what a backend reports about itself (``capabilities()``).

    ``info`` has the keys :func:`capabilities_from_wire` returns; ``command_sandbox`` travels as
    ``sandbox``. A limit that is ``None`` or missing is left unset ("no limit"); ``chunk_bytes``
    is :data:`CHUNK_BYTES`, the most any message carries on every transport.
    """
    limits = pb.Limits(chunk_bytes=CHUNK_BYTES)
    for key, value in dict(info.get("limits") or {}).items():
        if value is not None and key in LIMIT_KEYS and key != "chunk_bytes":
            setattr(limits, key, value)
    return pb.CapabilitiesReply(
        version=version,
        root=root,
        resolver=str(info.get("resolver", "")),
        openat2_available=bool(info.get("openat2_available", False)),
        search=str(info.get("search", "")),
        tracking=str(info.get("tracking", "")),
        cgroup_kill=bool(info.get("cgroup_kill", False)),
        sandbox=bool(info.get("command_sandbox", False)),
        landlock_abi=int(info.get("landlock_abi", 0)),
        powershell=bool(info.get("powershell", False)),
        limits=limits,
    )


def capabilities_from_wire(reply: pb.CapabilitiesReply) -> dict[str, Any]:
    """A Capabilities reply as the dict a local backend's ``capabilities()`` returns: the same
    keys (``version`` and ``root`` are not among them), an unset limit as ``None``."""
    limits = reply.limits
    return {
        "resolver": reply.resolver,
        "openat2_available": reply.openat2_available,
        "search": reply.search,
        "tracking": reply.tracking,
        "cgroup_kill": reply.cgroup_kill,
        "command_sandbox": reply.sandbox,
        "landlock_abi": reply.landlock_abi,
        "powershell": reply.powershell,
        "limits": {
            key: getattr(limits, key) if key == "chunk_bytes" or limits.HasField(key) else None
            for key in LIMIT_KEYS
        },
    }
