"""Value types that cross the Operations interfaces (and, unchanged, the wire)."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = [
    "DirEntry",
    "ExecResult",
    "FileKind",
    "FileStat",
    "KillReason",
    "OnData",
    "SearchMatch",
]


class FileKind(enum.Enum):
    """What a path names. ``OTHER`` covers FIFOs, sockets and devices."""

    FILE = "file"
    DIRECTORY = "directory"
    SYMLINK = "symlink"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class FileStat:
    """The metadata a tool needs: kind, size in bytes, permission bits, modification time (s)."""

    kind: FileKind
    size: int
    mode: int
    mtime: float

    @property
    def is_directory(self) -> bool:
        return self.kind is FileKind.DIRECTORY

    @property
    def is_file(self) -> bool:
        return self.kind is FileKind.FILE

    @property
    def is_symlink(self) -> bool:
        return self.kind is FileKind.SYMLINK


@dataclass(frozen=True, slots=True)
class DirEntry:
    """One directory entry, as ``readdir`` would see it (the kind is not followed through links)."""

    name: str
    kind: FileKind


@dataclass(frozen=True, slots=True)
class SearchMatch:
    """One matching line found by ``search``.

    ``path`` is absolute, in the backend's namespace. ``line_number`` counts from 1.
    ``line_text`` is the line without its line terminator, or ``None`` when the line is not
    valid UTF-8 (the grep tool then reads the file itself, as the reference does).
    """

    path: str
    line_number: int
    line_text: str | None


class KillReason(enum.Enum):
    """Why the broker killed a command's process tree."""

    TIMEOUT = "timeout"
    ABORTED = "aborted"
    OUTPUT_LIMIT = "output_limit"
    SHUTDOWN = "shutdown"
    KILLED = "killed"  # a started process's ``kill`` was called
    IDLE_TIMEOUT = "idle_timeout"  # a started process produced no output for its idle timeout


@dataclass(frozen=True, slots=True)
class ExecResult:
    """How a command ended.

    ``exit_code`` is the shell's exit status, or ``None`` when it has none: the broker killed the
    tree (``kill_reason`` says why) or a signal the broker did not send ended the shell
    (``signal`` says which, e.g. ``2`` for ``^C``; the reference reports such a shell as ``null``).
    A command that ended on its own has ``kill_reason=None``.
    """

    exit_code: int | None
    kill_reason: KillReason | None = None
    signal: int | None = None

    @property
    def killed(self) -> bool:
        return self.kill_reason is not None


OnData = Callable[[bytes], Awaitable[None] | None]
"""Receives raw output bytes as they arrive. If it returns an awaitable, the producer waits for it
(backpressure); a slow consumer slows the command rather than growing a buffer."""
