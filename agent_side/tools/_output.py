"""The streaming output accumulator behind ``bash`` and ``powershell``.

Command output arrives as raw byte chunks. The accumulator decodes them as one UTF-8 stream (a
character split across chunks decodes whole; invalid bytes become U+FFFD), keeps only a bounded
tail of the text for the model, and, once the output outgrows the limits, spills the complete raw
bytes to a local temp file. When the command ends, the shell tools save that file where the model
can read it and delete it (:mod:`agent_side.tools._saved_output`).
"""

from __future__ import annotations

import codecs
import os
import secrets
import tempfile
from dataclasses import dataclass, replace
from typing import BinaryIO

from ._truncate import DEFAULT_MAX_BYTES, DEFAULT_MAX_LINES, TruncationResult, truncate_tail

__all__ = ["OutputAccumulator", "OutputSnapshot"]


@dataclass(frozen=True, slots=True)
class OutputSnapshot:
    """The text to show now, how it was cut, and the temp file holding everything (if any)."""

    content: str
    truncation: TruncationResult
    full_output_path: str | None


class OutputAccumulator:
    """Collect a command's output within ``max_lines`` / ``max_bytes``; spill the rest to a file.

    Args:
        max_lines, max_bytes: the limits of the text the model sees (the tail is kept).
        temp_file_prefix: the temp file is ``<tmpdir>/<prefix>-<16 hex>.log``.
    """

    def __init__(
        self,
        *,
        max_lines: int = DEFAULT_MAX_LINES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        temp_file_prefix: str = "pi-output",
    ) -> None:
        self._max_lines = max_lines
        self._max_bytes = max_bytes
        self._prefix = temp_file_prefix
        # The tail kept in memory: twice the byte limit, trimmed when it doubles again.
        self._window = max(2 * max_bytes, 1)
        self._decoder = codecs.getincrementaldecoder("utf-8-sig")("replace")
        self._tail = bytearray()
        self._tail_starts_mid_line = False
        self._raw_bytes = 0
        self._decoded_bytes = 0
        self._completed_lines = 0
        self._open_line = False
        self._last_line_bytes = 0
        self._pending_raw: list[bytes] = []
        self._file: BinaryIO | None = None
        self._path: str | None = None
        self._finished = False

    @property
    def total_lines(self) -> int:
        return self._completed_lines + (1 if self._open_line else 0)

    @property
    def last_line_bytes(self) -> int:
        """Bytes after the last newline (0 when the output ends with one, as the reference says)."""
        return self._last_line_bytes

    @property
    def full_output_path(self) -> str | None:
        return self._path

    def append(self, data: bytes) -> None:
        """Add a raw chunk. Raises ``RuntimeError`` after :meth:`finish`."""
        if self._finished:
            raise RuntimeError("Cannot append to a finished output accumulator")
        self._raw_bytes += len(data)
        if self._file is not None:
            self._file.write(data)
        else:
            self._pending_raw.append(bytes(data))
        self._add_text(self._decoder.decode(data))
        if self._over_limits():
            self._ensure_file()

    def finish(self) -> None:
        """Flush the decoder (a dangling partial character becomes U+FFFD). Idempotent."""
        if self._finished:
            return
        self._finished = True
        self._add_text(self._decoder.decode(b"", final=True))
        if self._over_limits():
            self._ensure_file()

    def snapshot(self, *, persist_if_truncated: bool = False) -> OutputSnapshot:
        """The tail as the model should see it now, with totals over everything received."""
        text = self._tail.decode("utf-8", "replace")
        if self._tail_starts_mid_line:
            newline = text.find("\n")
            text = text[newline + 1 :] if newline >= 0 else text
        tail = truncate_tail(text, max_lines=self._max_lines, max_bytes=self._max_bytes)
        truncated = self.total_lines > self._max_lines or self._decoded_bytes > self._max_bytes
        by = tail.truncated_by
        if truncated and by is None:
            by = "bytes" if self._decoded_bytes > self._max_bytes else "lines"
        truncation = replace(
            tail,
            truncated=truncated,
            truncated_by=by if truncated else None,
            total_lines=self.total_lines,
            total_bytes=self._decoded_bytes,
        )
        if persist_if_truncated and truncated:
            self._ensure_file()
        return OutputSnapshot(tail.content, truncation, self._path)

    def close_temp_file(self) -> None:
        """Flush and close the temp file; it is complete on disk when this returns."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def _add_text(self, text: str) -> None:
        if not text:
            return
        encoded = text.encode("utf-8", "surrogatepass")
        self._decoded_bytes += len(encoded)
        newlines = text.count("\n")
        self._completed_lines += newlines
        if newlines:
            self._last_line_bytes = len(encoded) - encoded.rfind(b"\n") - 1
        else:
            self._last_line_bytes += len(encoded)
        self._open_line = not text.endswith("\n")
        self._tail += encoded
        if len(self._tail) > 2 * self._window:
            cut = len(self._tail) - self._window
            while cut < len(self._tail) and (self._tail[cut] & 0xC0) == 0x80:
                cut += 1
            self._tail_starts_mid_line = self._tail[cut - 1] != 0x0A
            del self._tail[:cut]

    def _over_limits(self) -> bool:
        return (
            self._raw_bytes > self._max_bytes
            or self._decoded_bytes > self._max_bytes
            or self.total_lines > self._max_lines
        )

    def _ensure_file(self) -> None:
        if self._path is not None:
            return
        path = os.path.join(tempfile.gettempdir(), f"{self._prefix}-{secrets.token_hex(8)}.log")
        handle = open(path, "wb")  # noqa: SIM115 - stays open across appends; closed by close_temp_file
        for chunk in self._pending_raw:
            handle.write(chunk)
        self._pending_raw.clear()
        self._path = path
        if self._finished:
            handle.close()
        else:
            self._file = handle
