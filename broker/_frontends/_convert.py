"""Operations values to wire messages, and back, for the broker's front-ends (gRPC and SSH).

One table per enum and one small function per value type, so that both front-ends translate the
same way. The client side has the mirror image in ``agent_side._remote._convert``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final, TypeVar

from opsbroker.v1 import broker_pb2 as pb

from operations import DirEntry, ExecResult, FileKind, FileStat, KillReason, OpsError, SearchMatch

__all__ = [
    "CHUNK_BYTES",
    "NAMES_PER_BATCH",
    "batches",
    "chunks",
    "entry_to_pb",
    "error_to_pb",
    "exit_to_pb",
    "match_to_pb",
    "stat_to_pb",
]

T = TypeVar("T")

CHUNK_BYTES: Final = 64 * 1024
"""Largest data payload of one Chunk, WriteFileRequest or ExecEvent.output (the proto's rule)."""

NAMES_PER_BATCH: Final = 1024
"""Names (or entries) per Names / DirEntries message: a big directory never makes one huge message."""

KIND_TO_PB: Final[dict[FileKind, pb.FileKind]] = {
    FileKind.FILE: pb.FILE_KIND_FILE,
    FileKind.DIRECTORY: pb.FILE_KIND_DIRECTORY,
    FileKind.SYMLINK: pb.FILE_KIND_SYMLINK,
    FileKind.OTHER: pb.FILE_KIND_OTHER,
}

KILL_TO_PB: Final[dict[KillReason | None, pb.KillReason]] = {
    None: pb.KILL_REASON_UNSPECIFIED,
    KillReason.TIMEOUT: pb.KILL_REASON_TIMEOUT,
    KillReason.ABORTED: pb.KILL_REASON_ABORTED,
    KillReason.OUTPUT_LIMIT: pb.KILL_REASON_OUTPUT_LIMIT,
    KillReason.SHUTDOWN: pb.KILL_REASON_SHUTDOWN,
}


def stat_to_pb(stat: FileStat) -> pb.FileStat:
    return pb.FileStat(kind=KIND_TO_PB[stat.kind], size=stat.size, mode=stat.mode, mtime=stat.mtime)


def entry_to_pb(entry: DirEntry) -> pb.DirEntry:
    return pb.DirEntry(name=entry.name, kind=KIND_TO_PB[entry.kind])


def match_to_pb(match: SearchMatch) -> pb.SearchMatch:
    return pb.SearchMatch(path=match.path, line_number=match.line_number, line_text=match.line_text)


def exit_to_pb(result: ExecResult) -> pb.ExecExit:
    return pb.ExecExit(exit_code=result.exit_code, kill_reason=KILL_TO_PB[result.kill_reason])


def error_to_pb(error: OpsError) -> pb.ErrorDetail:
    """The ErrorDetail of ``error``: its stable code, op, path, reason and (policy) rule."""
    return pb.ErrorDetail(
        code=error.code,
        op=error.op,
        path=error.path,
        reason=error.reason,
        rule=getattr(error, "rule", None),
    )


def chunks(data: bytes, size: int = CHUNK_BYTES) -> Iterator[bytes]:
    """``data`` in slices of at most ``size`` bytes; one empty slice for empty data."""
    if not data:
        yield b""
        return
    view = memoryview(data)
    for start in range(0, len(data), size):
        yield bytes(view[start : start + size])


def batches(items: Sequence[T], size: int = NAMES_PER_BATCH) -> Iterator[Sequence[T]]:
    """``items`` in slices of at most ``size``; one empty slice for no items."""
    if not items:
        yield items
        return
    for start in range(0, len(items), size):
        yield items[start : start + size]
