"""Bytes at any offsets, kept in an anonymous temporary file instead of in memory.

The SFTP server spools an upload here until the client closes it (writes come at any offset;
the backend's atomic replace takes one stream), and the content of a file opened for writing
without truncation. The file has no name (``tempfile.TemporaryFile``: ``O_TMPFILE``
on Linux), lives in the broker's temp directory, never under the workspace root, and is gone
once closed, even if the broker dies.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from typing import IO, Final

from operations import TooLarge, Unavailable

__all__ = [
    "SPOOL_FREE_RESERVE_BYTES",
    "SPOOL_FREE_RESERVE_FRACTION",
    "Spool",
    "spool_directory",
]

SPOOL_FREE_RESERVE_BYTES: Final = 1024 * 1024 * 1024
"""Free space a spool never takes its file system below: room for everything else on the
broker's temp disk (the audit log, commands' temp files, the workspace if it shares the disk)..."""

SPOOL_FREE_RESERVE_FRACTION: Final = 0.05
"""...or this share of the file system if less (a small temp disk is not refused outright;
5% is what ext4 keeps for root)."""


def spool_directory(root: str) -> str:
    """The directory spools go to: the broker's temp directory (``TMPDIR``, else ``/tmp``...).

    Raises:
        Unavailable: that directory lies inside the workspace ``root`` (what the workspace
            holds is the clients' to read and write; the broker's own files stay outside it).
    """
    directory = os.path.realpath(tempfile.gettempdir())
    workspace = os.path.realpath(root)
    if os.path.commonpath([directory, workspace]) == workspace:
        raise Unavailable(
            "spool",
            directory,
            "the broker's temp directory is inside the workspace root; "
            "start the broker with TMPDIR set to a directory outside it",
        )
    return directory


class Spool:
    """A sparse byte store in an anonymous temporary file, created on the first write.

    ``op`` and ``path`` name what the spool is for in its errors. Bytes never written read as
    zeros, up to :attr:`size` (the end of the furthest write).
    """

    def __init__(self, directory: str, op: str, path: str) -> None:
        self._directory = directory
        self._op = op
        self._path = path
        self._file: IO[bytes] | None = None
        self.size = 0

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Store ``data`` at ``offset``; a gap before it reads as zeros.

        Raises:
            TooLarge: the spool would leave less than its reserve free on its disk
                (:data:`SPOOL_FREE_RESERVE_BYTES`, :data:`SPOOL_FREE_RESERVE_FRACTION`).
            Unavailable: the temporary file cannot be created or written (disk full, ...).
        """
        if not data:
            return
        end = offset + len(data)
        try:
            fd = self._fd()
            if end > self.size:
                self._check_room(fd, end - self.size)
            view = memoryview(data)
            while view:
                written = os.pwrite(fd, view, offset)
                view, offset = view[written:], offset + written
        except OSError as exc:
            raise self._unavailable(exc) from None
        self.size = max(self.size, end)

    def append(self, data: bytes | bytearray | memoryview) -> None:
        """Store ``data`` at :attr:`size`."""
        self.write(self.size, data)

    def read(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``offset``; fewer only at :attr:`size`, none past it."""
        size = min(size, self.size - offset)
        if size <= 0 or self._file is None:
            return b""
        try:
            data = os.pread(self._file.fileno(), size, offset)
            while len(data) < size:  # a short read is possible on any file; finish it
                more = os.pread(self._file.fileno(), size - len(data), offset + len(data))
                if not more:
                    break
                data += more
        except OSError as exc:
            raise self._unavailable(exc) from None
        return data

    async def pieces(self, chunk_size: int) -> AsyncIterator[bytes]:
        """The whole content, in pieces of at most ``chunk_size`` bytes (for a stream write).

        Pieces are read on the event loop: the spool was just written, so they come from the
        page cache.
        """
        for offset in range(0, self.size, chunk_size):
            yield self.read(offset, chunk_size)

    def close(self) -> None:
        """Free the file (its space is released with it). Idempotent."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def _fd(self) -> int:
        if self._file is None:
            # closed by close(): the spool outlives any one call
            self._file = tempfile.TemporaryFile(dir=self._directory, buffering=0)  # noqa: SIM115
        return self._file.fileno()

    def _check_room(self, fd: int, growth: int) -> None:
        info = os.fstatvfs(fd)
        free = info.f_bavail * info.f_frsize
        reserve = min(
            SPOOL_FREE_RESERVE_BYTES,
            int(info.f_blocks * info.f_frsize * SPOOL_FREE_RESERVE_FRACTION),
        )
        if free - growth < reserve:
            raise TooLarge(
                self._op,
                self._path,
                f"the broker's temp disk ({self._directory}) would keep less than {reserve} "
                "bytes free; the transfer is refused, free space there or move TMPDIR to a "
                "larger disk",
            )

    def _unavailable(self, exc: OSError) -> Unavailable:
        return Unavailable(
            self._op,
            self._path,
            f"the broker's temp file in {self._directory} failed: {exc.strerror or exc}",
        )
