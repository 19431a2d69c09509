"""Truncation: the reference's verified examples and limits (pi-tools 1.1)."""

from __future__ import annotations

import pytest

from agent_side.tools._truncate import (
    DEFAULT_MAX_BYTES,
    format_size,
    truncate_head,
    truncate_line,
    truncate_tail,
)


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0B"), (1023, "1023B"), (1024, "1.0KB"), (1536, "1.5KB"), (51200, "50.0KB"),
     (1048576, "1.0MB")],
)  # fmt: skip
def test_format_size(size: int, text: str) -> None:
    assert format_size(size) == text


def test_untouched_content_keeps_trailing_newline() -> None:
    result = truncate_head("a\nb\n")
    assert result.content == "a\nb\n"
    assert (result.truncated, result.truncated_by, result.total_lines) == (False, None, 2)
    assert truncate_head("a\nb").total_lines == 2
    assert truncate_head("").total_lines == 0


def test_tail_by_lines() -> None:
    result = truncate_tail("a\nb\nc\n", max_lines=2)
    assert result.content == "b\nc"
    assert (result.total_lines, result.total_bytes, result.truncated_by) == (3, 6, "lines")


def test_tail_partial_last_line() -> None:
    result = truncate_tail("x" * 10, max_bytes=4)
    assert result.content == "xxxx"
    assert result.last_line_partial
    assert result.truncated_by == "bytes"


def test_tail_partial_cuts_on_character_boundary() -> None:
    result = truncate_tail("€" * 10, max_bytes=4)
    assert result.content == "€"
    assert result.output_bytes == 3


def test_head_first_line_too_big() -> None:
    result = truncate_head("x" * 10 + "\nab", max_bytes=4)
    assert result.content == ""
    assert result.first_line_exceeds_limit
    assert (result.output_lines, result.output_bytes, result.truncated_by) == (0, 0, "bytes")


def test_head_by_lines_and_bytes() -> None:
    text = "\n".join(f"Line {i}" for i in range(1, 2501))
    result = truncate_head(text)
    assert (result.truncated_by, result.output_lines, result.total_lines) == ("lines", 2000, 2500)
    assert result.content.endswith("Line 2000")
    wide = "\n".join("y" * 100 for _ in range(1000))
    result = truncate_head(wide)
    assert result.truncated_by == "bytes"
    assert result.output_lines == 506
    assert result.output_bytes == 506 * 101 - 1 <= DEFAULT_MAX_BYTES


def test_truncate_line_counts_utf16_units() -> None:
    assert truncate_line("a" * 500) == ("a" * 500, False)
    assert truncate_line("a" * 501) == ("a" * 500 + "... [truncated]", True)
    text, cut = truncate_line("😀" * 300)  # 600 UTF-16 units
    assert cut
    assert text == "😀" * 250 + "... [truncated]"


def test_truncate_line_never_leaves_half_a_character() -> None:
    """Parity exception: the reference leaves a lone surrogate where the cut splits an emoji."""
    text, cut = truncate_line("a" + "😀" * 300)
    assert cut
    assert text == "a" + "😀" * 249 + "\ufffd... [truncated]"
    text.encode("utf-8")  # valid text, unlike a lone surrogate
