"""One file open through SFTP, with bounded memory whatever its size and the access pattern.

A download streams from the backend (``read_chunks``). Clients read in offset order (OpenSSH
``sftp`` and asyncssh keep several reads in flight, but the server answers them one at a time),
so a read is answered from a small in-memory window at the stream's head, and a read ahead of it
pulls the stream forward; a read behind the window (a seek back) reads the file again from its
start. A download keeps nothing on disk. An upload goes to a :class:`~._spool.Spool` at any
offset and reaches the backend on close as one ``write_chunks`` stream: the replace is atomic.
"""

from __future__ import annotations

import errno
import os
from collections import deque
from collections.abc import AsyncGenerator
from typing import Final

from operations import Aborted, Backend, read_chunks, write_chunks

from ._spool import Spool

__all__ = ["MAX_READ_REPLY_BYTES", "READ_PIECE_BYTES", "READ_WINDOW_BYTES", "SFTPFile"]

READ_PIECE_BYTES: Final = 256 * 1024
"""Size of the pieces a download's stream and an upload's commit move (the core's own piece)."""

MAX_READ_REPLY_BYTES: Final = 4 * 1024 * 1024
"""The most one READ returns (SFTP allows short reads; asyncssh's own maximum read length): a
client asking for gigabytes at once gets them in pieces, not in one allocation."""

READ_WINDOW_BYTES: Final = MAX_READ_REPLY_BYTES + READ_PIECE_BYTES
"""Bytes of a download kept in memory at the stream's head: the largest read, plus the piece
that overshot it, so reads in order never read the file again."""

_NO_HOLE: Final = 2**63 - 1  # SEEK_HOLE before the end is known: past any offset a client asks


class SFTPFile:
    """An open SFTP file: ``path`` on ``backend``, a download stream or an upload spool.

    Create with :meth:`download` or :meth:`upload`; always :meth:`close` it (or
    :meth:`discard` it: the client went away), which frees the stream and the spool.
    """

    def __init__(self, backend: Backend, path: str, spool: Spool, *, writable: bool) -> None:
        self.path = path
        self.writable = writable
        self._backend = backend
        self._spool = spool
        self._stream: AsyncGenerator[bytes, None] | None = None
        self._window: deque[bytes] = deque()  # the stream's last pieces, as it gave them
        self._window_bytes = 0  # they hold [streamed - window_bytes, streamed)
        self._streamed = 0
        self._dirty = False
        self._failed: BaseException | None = None  # the stream's error, raised again on reads

    @classmethod
    async def download(
        cls, backend: Backend, path: str, spool: Spool, *, writable: bool = False
    ) -> SFTPFile:
        """``path`` open for reading (and writing, over its current content, if ``writable``).

        The stream's first piece is read here, so a missing file, a directory or a refusal
        is the open's error; a file smaller than a piece is then read to its end (its size is
        known for ``fstat``, its stream closed at once). A writable file's content is spooled
        whole first (writes land on it, reads see them).
        """
        opened = cls(backend, path, spool, writable=writable)
        try:
            if writable:
                pieces = read_chunks(backend, path, READ_PIECE_BYTES)
                try:
                    async for piece in pieces:
                        spool.append(piece)
                finally:
                    await pieces.aclose()
            else:
                opened._stream = read_chunks(backend, path, READ_PIECE_BYTES)
                await opened._pull(READ_PIECE_BYTES)
        except BaseException:
            await opened.discard()
            raise
        return opened

    @classmethod
    def upload(cls, backend: Backend, path: str, spool: Spool) -> SFTPFile:
        """``path`` created or truncated: nothing reaches the backend before :meth:`close`."""
        opened = cls(backend, path, spool, writable=True)
        opened._dirty = True
        return opened

    @property
    def size(self) -> int | None:
        """The size so far, or ``None`` while a download's stream has not reached the end."""
        if self._stream is not None:
            return None
        return self._streamed if not self.writable else self._spool.size

    async def read(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``offset``; ``b""`` at or past the end."""
        if self.writable:
            return self._spool.read(offset, min(size, MAX_READ_REPLY_BYTES))
        # Never more than the window can hold past the piece that overshoots (a short read).
        end = offset + min(size, MAX_READ_REPLY_BYTES, READ_WINDOW_BYTES - READ_PIECE_BYTES)
        if offset < self._streamed - self._window_bytes:
            await self._restart()  # behind the window: read the file again from its start
        await self._pull(end)
        end = min(end, self._streamed)
        if offset >= end:
            return b""
        # The window holds the largest read and more: [offset, end) lies inside it.
        parts: list[memoryview] = []
        start = self._streamed - self._window_bytes
        for piece in self._window:  # a few pieces: the window is a few MiB
            stop = start + len(piece)
            if stop > offset and start < end:
                parts.append(memoryview(piece)[max(offset - start, 0) : end - start])
            start = stop
        return b"".join(parts)

    def seek(self, offset: int, whence: int) -> int:
        """``SEEK_DATA`` / ``SEEK_HOLE`` for asyncssh's ``ranges@asyncssh.com`` extension (the
        sparse copy of ``SFTPClient.get``), which asks the open file object directly.

        No holes are reported: from any offset before the end, the rest of the file is data
        (a stream does not know its holes; a client asks only up to the size it saw).
        """
        size = self.size
        if whence == os.SEEK_DATA:
            if size is not None and offset >= size:
                raise OSError(errno.ENXIO, "no data past the end of the file")
            return offset
        if whence == os.SEEK_HOLE:
            return size if size is not None else _NO_HOLE
        raise OSError(errno.EINVAL, "only SEEK_DATA and SEEK_HOLE are served")

    def write(self, offset: int, data: bytes) -> None:
        """Store ``data`` at ``offset`` (the caller checked :attr:`writable`)."""
        self._spool.write(offset, data)
        self._dirty = True

    async def close(self) -> None:
        """The client closed the file: commit what it wrote (atomically), then free it all.

        Raises what ``write_chunks`` raises (nothing is written then, the old file stays).
        """
        try:
            if self._dirty:
                self._dirty = False
                await write_chunks(self._backend, self.path, self._spool.pieces(READ_PIECE_BYTES))
        finally:
            await self.discard()

    async def discard(self) -> None:
        """Free the stream and the spool without committing anything. Idempotent."""
        self._window.clear()
        self._spool.close()
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.aclose()

    async def _pull(self, end: int | None) -> None:
        """Advance the stream until it has passed ``end`` (``None``: to its end), spooling
        what leaves the window."""
        if self._failed is not None:
            raise self._failed  # never mistake a broken stream's end for the file's end
        stream = self._stream
        while stream is not None and (end is None or self._streamed < end):
            try:
                piece = await anext(stream, None)
            except BaseException as exc:
                # A generator that raised (or was cancelled) is finished: its next anext
                # would look like the end of the file.
                self._failed = (
                    exc
                    if isinstance(exc, Exception)
                    else Aborted("read_file", self.path, "an earlier read was cancelled")
                )
                self._stream = None
                raise
            if piece is None:
                self._stream = None
                await stream.aclose()
                return
            self._window.append(piece)
            self._window_bytes += len(piece)
            while self._window_bytes - len(self._window[0]) >= READ_WINDOW_BYTES:
                self._window_bytes -= len(self._window.popleft())
            self._streamed += len(piece)

    async def _restart(self) -> None:
        """Drop the stream and the window, and open the file's stream again at its start."""
        if self._failed is not None:
            raise self._failed
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.aclose()
        self._window.clear()
        self._window_bytes = self._streamed = 0
        self._stream = read_chunks(self._backend, self.path, READ_PIECE_BYTES)
