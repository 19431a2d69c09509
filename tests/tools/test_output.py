"""The streaming output accumulator (pi-tools 1.4, verified snapshot table)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_side.tools._output import OutputAccumulator


def _feed(data: bytes, chunk: int = 4096) -> OutputAccumulator:
    acc = OutputAccumulator(temp_file_prefix="test-acc")
    for start in range(0, len(data), chunk):
        acc.append(data[start : start + chunk])
    acc.finish()
    acc.close_temp_file()
    return acc


def test_small_output_kept_whole() -> None:
    acc = _feed(b"a\nb\n")
    snap = acc.snapshot(persist_if_truncated=True)
    assert snap.content == "a\nb\n"
    assert not snap.truncation.truncated
    assert snap.truncation.truncated_by is None
    assert snap.truncation.total_lines == 2
    assert snap.full_output_path is None


def test_many_lines_spill_to_file() -> None:
    data = "".join(f"{i}\n" for i in range(1, 3001)).encode()
    acc = _feed(data, chunk=7)
    snap = acc.snapshot(persist_if_truncated=True)
    acc.close_temp_file()
    assert snap.content.startswith("1001\n") and snap.content.endswith("\n3000")
    assert (snap.truncation.truncated_by, snap.truncation.total_lines) == ("lines", 3000)
    assert snap.truncation.output_lines == 2000
    assert snap.full_output_path is not None
    assert Path(snap.full_output_path).read_bytes() == data
    assert Path(snap.full_output_path).name.startswith("test-acc-")


def test_wide_lines_truncated_by_bytes() -> None:
    acc = _feed(("y" * 100 + "\n").encode() * 1000)
    snap = acc.snapshot()
    assert snap.truncation.truncated_by == "bytes"
    assert (snap.truncation.output_lines, snap.truncation.output_bytes) == (506, 51105)
    assert snap.truncation.total_lines == 1000


def test_one_long_line() -> None:
    acc = _feed(b"z" * 60000)
    snap = acc.snapshot()
    assert snap.truncation.last_line_partial
    assert len(snap.content) == 51200
    assert acc.last_line_bytes == 60000
    assert (snap.truncation.total_lines, snap.truncation.output_lines) == (1, 1)


def test_long_line_ending_in_newline_reports_zero_bytes() -> None:
    acc = _feed(b"z" * 60000 + b"\n")
    assert acc.last_line_bytes == 0


def test_split_multibyte_character() -> None:
    euro = "€".encode()
    acc = OutputAccumulator()
    acc.append(b"price " + euro[:1])
    acc.append(euro[1:] + b"\n")
    acc.finish()
    assert acc.snapshot().content == "price €\n"


def test_invalid_bytes_and_bom() -> None:
    acc = _feed(b"\xef\xbb\xbfok \xff\n")
    assert acc.snapshot().content == "ok \ufffd\n"


def test_huge_output_keeps_bounded_tail() -> None:
    acc = OutputAccumulator()
    line = b"x" * 99 + b"\n"
    for _ in range(10_000):  # 1 MB
        acc.append(line)
    acc.finish()
    snap = acc.snapshot(persist_if_truncated=True)
    acc.close_temp_file()
    assert snap.truncation.total_lines == 10_000
    assert snap.content.split("\n")[0] == "x" * 99  # the trimmed tail never shows half a line
    assert snap.full_output_path is not None
    assert Path(snap.full_output_path).stat().st_size == 1_000_000


def test_append_after_finish_fails() -> None:
    acc = OutputAccumulator()
    acc.finish()
    with pytest.raises(RuntimeError, match="Cannot append to a finished output accumulator"):
        acc.append(b"x")
