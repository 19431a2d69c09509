"""Wire messages to Operations values, for the remote clients (gRPC and SSH).

The mirror image of ``broker._frontends._convert``: one table per enum and one small function per
value type, so that every remote backend rebuilds the same values and the same error types.
"""

from __future__ import annotations

from typing import Final

from opsbroker.v1 import broker_pb2 as pb

from operations import (
    DirEntry,
    ExecResult,
    FileKind,
    FileStat,
    KillReason,
    OpsError,
    SearchMatch,
    error_from_code,
)

__all__ = [
    "KILL_FROM_PB",
    "KIND_FROM_PB",
    "entry_from_pb",
    "error_from_pb",
    "exit_from_pb",
    "match_from_pb",
    "stat_from_pb",
]

KIND_FROM_PB: Final[dict[int, FileKind]] = {
    pb.FILE_KIND_FILE: FileKind.FILE,
    pb.FILE_KIND_DIRECTORY: FileKind.DIRECTORY,
    pb.FILE_KIND_SYMLINK: FileKind.SYMLINK,
    pb.FILE_KIND_OTHER: FileKind.OTHER,
}

KILL_FROM_PB: Final[dict[int, KillReason | None]] = {
    pb.KILL_REASON_UNSPECIFIED: None,
    pb.KILL_REASON_TIMEOUT: KillReason.TIMEOUT,
    pb.KILL_REASON_ABORTED: KillReason.ABORTED,
    pb.KILL_REASON_OUTPUT_LIMIT: KillReason.OUTPUT_LIMIT,
    pb.KILL_REASON_SHUTDOWN: KillReason.SHUTDOWN,
}


def stat_from_pb(message: pb.FileStat) -> FileStat:
    return FileStat(
        kind=KIND_FROM_PB.get(message.kind, FileKind.OTHER),
        size=message.size,
        mode=message.mode,
        mtime=message.mtime,
    )


def entry_from_pb(message: pb.DirEntry) -> DirEntry:
    return DirEntry(name=message.name, kind=KIND_FROM_PB.get(message.kind, FileKind.OTHER))


def match_from_pb(message: pb.SearchMatch) -> SearchMatch:
    return SearchMatch(
        path=message.path,
        line_number=message.line_number,
        line_text=message.line_text if message.HasField("line_text") else None,
    )


def exit_from_pb(message: pb.ExecExit) -> ExecResult:
    return ExecResult(
        exit_code=message.exit_code if message.HasField("exit_code") else None,
        kill_reason=KILL_FROM_PB.get(message.kill_reason),
    )


def error_from_pb(detail: pb.ErrorDetail) -> OpsError:
    """The Operations error a broker reported: same type, op, path, reason (and policy rule)."""
    return error_from_code(
        detail.code,
        detail.op,
        detail.path if detail.HasField("path") else None,
        detail.reason or None,
        rule=detail.rule if detail.HasField("rule") else None,
    )
