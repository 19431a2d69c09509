"""The read end of a pipe, fed to an ``asyncio.StreamReader``, on any event loop.

``loop.connect_read_pipe`` leaves who closes the pipe's fd to the loop, and loops differ: uvloop,
cancelled while it connects, closes the fd but not the file object that held it, which later
closes that fd number again when collected, whatever it names by then. Here the fd is ours and
is closed once, by :meth:`PipeReadTransport.close`; the loop only watches it (``add_reader``).
"""

from __future__ import annotations

import asyncio
import os
from typing import Final

__all__ = ["PipeReadTransport"]

READ_BYTES: Final = 64 * 1024
"""Bytes asked for per read: a pipe's default capacity."""


class PipeReadTransport(asyncio.ReadTransport):
    """Feed what the pipe ``fd`` delivers to ``reader`` until end of file; ``fd`` is the
    transport's from now on. Reading pauses while ``reader`` holds more than twice its limit
    (``StreamReader`` asks), so a slow consumer holds the writer back instead of filling memory.
    """

    def __init__(self, fd: int, reader: asyncio.StreamReader) -> None:
        super().__init__()
        self._loop = asyncio.get_running_loop()
        self._fd = fd
        self._reader = reader
        self._reading = False
        self._eof = False
        os.set_blocking(fd, False)
        reader.set_transport(self)
        self.resume_reading()

    def _ready(self) -> None:
        try:
            data = os.read(self._fd, READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._end()
            self._reader.set_exception(exc)
            return
        if data:
            self._reader.feed_data(data)
        else:
            self._end()
            self._reader.feed_eof()

    def _end(self) -> None:
        self._eof = True
        self.pause_reading()

    def is_reading(self) -> bool:
        return self._reading

    def pause_reading(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def resume_reading(self) -> None:
        if not (self._reading or self._eof or self._fd < 0):
            self._loop.add_reader(self._fd, self._ready)
            self._reading = True

    def is_closing(self) -> bool:
        return self._fd < 0

    def close(self) -> None:
        """Stop reading and close the fd (once; the reader sees no end of file from this)."""
        if self._fd >= 0:
            self.pause_reading()
            os.close(self._fd)
            self._fd = -1
