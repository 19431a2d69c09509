"""Head and tail truncation with the reference's limits, and the size format its notices use.

Everything the model sees is cut by one of these two functions: ``truncate_head`` keeps the
beginning (file reads, listings, search results), ``truncate_tail`` keeps the end (command output).
Lines are ``\\n``-separated and a trailing newline does not start another line; sizes are UTF-8 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Literal

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_LINES",
    "GREP_MAX_LINE_LENGTH",
    "TruncatedBy",
    "TruncationResult",
    "format_size",
    "truncate_head",
    "truncate_line",
    "truncate_tail",
]

DEFAULT_MAX_LINES = 2000  # what a model can usefully read in one result
DEFAULT_MAX_BYTES = 50 * 1024  # 51200: keeps one result well inside a context window
GREP_MAX_LINE_LENGTH = 500  # UTF-16 code units, as the reference counts characters

TruncatedBy = Literal["lines", "bytes"]


@dataclass(frozen=True, slots=True)
class TruncationResult:
    """What was kept and why; every field is always set (the reference's ``TruncationResult``)."""

    content: str
    truncated: bool
    truncated_by: TruncatedBy | None
    total_lines: int
    total_bytes: int
    output_lines: int
    output_bytes: int
    last_line_partial: bool
    first_line_exceeds_limit: bool
    max_lines: int
    max_bytes: int

    def to_json(self) -> dict[str, object]:
        """The reference's camelCase field names, for ``details``."""
        return {
            "content": self.content,
            "truncated": self.truncated,
            "truncatedBy": self.truncated_by,
            "totalLines": self.total_lines,
            "totalBytes": self.total_bytes,
            "outputLines": self.output_lines,
            "outputBytes": self.output_bytes,
            "lastLinePartial": self.last_line_partial,
            "firstLineExceedsLimit": self.first_line_exceeds_limit,
            "maxLines": self.max_lines,
            "maxBytes": self.max_bytes,
        }


def format_size(size: int) -> str:
    """``1023B``, ``1.5KB``, ``1.0MB``: the notation every notice uses."""
    if size < 1024:
        return f"{size}B"
    if size < 1024 * 1024:
        return f"{_to_fixed(size / 1024)}KB"
    return f"{_to_fixed(size / (1024 * 1024))}MB"


def _to_fixed(value: float) -> str:
    # JavaScript's toFixed(1) rounds the exact binary value half away from zero; so does this.
    return str(Decimal(value).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _split_lines(content: str) -> list[str]:
    if content == "":
        return []
    lines = content.split("\n")
    if content.endswith("\n"):
        lines.pop()
    return lines


def _unchanged(
    content: str, lines: int, size: int, max_lines: int, max_bytes: int
) -> TruncationResult:
    return TruncationResult(
        content, False, None, lines, size, lines, size, False, False, max_lines, max_bytes
    )


def truncate_head(
    content: str, *, max_lines: int = DEFAULT_MAX_LINES, max_bytes: int = DEFAULT_MAX_BYTES
) -> TruncationResult:
    """Keep whole lines from the top, within ``max_lines`` and ``max_bytes``.

    A kept result has no trailing newline. If the first line alone exceeds ``max_bytes`` the content
    is empty and ``first_line_exceeds_limit`` is set: the caller tells the model how to read it.
    """
    lines = _split_lines(content)
    total_lines, total_bytes = len(lines), _utf8_len(content)
    if total_lines <= max_lines and total_bytes <= max_bytes:
        return _unchanged(content, total_lines, total_bytes, max_lines, max_bytes)
    if _utf8_len(lines[0]) > max_bytes:
        return TruncationResult(
            "", True, "bytes", total_lines, total_bytes, 0, 0, False, True, max_lines, max_bytes
        )
    kept: list[str] = []
    size = 0
    truncated_by: TruncatedBy = "lines"
    for line in lines:
        if len(kept) >= max_lines:
            break
        cost = _utf8_len(line) + (1 if kept else 0)
        if size + cost > max_bytes:
            truncated_by = "bytes"
            break
        kept.append(line)
        size += cost
    if len(kept) >= max_lines and size <= max_bytes:
        truncated_by = "lines"
    out = "\n".join(kept)
    return TruncationResult(
        out, True, truncated_by, total_lines, total_bytes, len(kept), _utf8_len(out),
        False, False, max_lines, max_bytes,
    )  # fmt: skip


def truncate_tail(
    content: str, *, max_lines: int = DEFAULT_MAX_LINES, max_bytes: int = DEFAULT_MAX_BYTES
) -> TruncationResult:
    """Keep whole lines from the bottom, within ``max_lines`` and ``max_bytes``.

    If even the last line is too big, its last ``max_bytes`` bytes are kept (cut on a character
    boundary) and ``last_line_partial`` is set. A kept result has no trailing newline.
    """
    lines = _split_lines(content)
    total_lines, total_bytes = len(lines), _utf8_len(content)
    if total_lines <= max_lines and total_bytes <= max_bytes:
        return _unchanged(content, total_lines, total_bytes, max_lines, max_bytes)
    kept: list[str] = []
    size = 0
    truncated_by: TruncatedBy = "lines"
    partial = False
    for line in reversed(lines):
        if len(kept) >= max_lines:
            break
        cost = _utf8_len(line) + (1 if kept else 0)
        if size + cost > max_bytes:
            truncated_by = "bytes"
            if not kept:
                kept.append(_last_bytes(line, max_bytes))
                size = _utf8_len(kept[0])
                partial = True
            break
        kept.append(line)
        size += cost
    if len(kept) >= max_lines and size <= max_bytes:
        truncated_by = "lines"
    kept.reverse()
    out = "\n".join(kept)
    return TruncationResult(
        out, True, truncated_by, total_lines, total_bytes, len(kept), _utf8_len(out),
        partial, False, max_lines, max_bytes,
    )  # fmt: skip


def _last_bytes(line: str, max_bytes: int) -> str:
    data = line.encode("utf-8", "surrogatepass")
    start = len(data) - max_bytes
    while start < len(data) and (data[start] & 0xC0) == 0x80:
        start += 1
    return data[start:].decode("utf-8", "surrogatepass")


def truncate_line(line: str, max_chars: int = GREP_MAX_LINE_LENGTH) -> tuple[str, bool]:
    """Cut ``line`` to ``max_chars`` UTF-16 code units plus ``... [truncated]``; say if it was cut."""
    if len(line) <= max_chars // 2 or _utf16_len(line) <= max_chars:
        return line, False
    units = line.encode("utf-16-le", "surrogatepass")[: max_chars * 2]
    # A cut through a surrogate pair leaves half a character; it renders as U+FFFD.
    return units.decode("utf-16-le", "replace") + "... [truncated]", True


def _utf16_len(text: str) -> int:
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)
