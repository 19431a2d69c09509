"""``write_file`` and ``write_chunks`` with ``mode``: the same permission bits on every backend.

A file written with ``mode`` gets exactly those bits, whether it is new or replaces one (whose
own mode is kept only when no ``mode`` is given); a mode out of range is refused before
anything is written. ``write_chunks`` is the helper front-ends stream through, so a backend
without a stream of its own (the memory backend) takes the same path.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from opsbroker.v1.codec import CHUNK_BYTES

from operations import InvalidArgument, write_chunks
from tests.conformance._workspace import Workspace


async def _pieces(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_write_file_with_mode_creates_with_it(ws: Workspace) -> None:
    await ws.ops.write_file(ws.path("run.sh"), b"#!/bin/sh\n", mode=0o750)
    assert ws.read_raw("run.sh") == b"#!/bin/sh\n"
    assert ws.mode_raw("run.sh") == 0o750
    assert (await ws.ops.stat(ws.path("run.sh"))).mode & 0o777 == 0o750


async def test_write_file_with_mode_replaces_the_old_mode(ws: Workspace) -> None:
    ws.write_raw("notes.txt", b"old")
    ws.chmod_raw("notes.txt", 0o644)
    await ws.ops.write_file(ws.path("notes.txt"), b"new", mode=0o600)
    assert ws.read_raw("notes.txt") == b"new"
    assert ws.mode_raw("notes.txt") == 0o600
    await ws.ops.write_file(ws.path("notes.txt"), b"newer")
    assert ws.mode_raw("notes.txt") == 0o600, "without a mode, the replaced file keeps its own"


async def test_write_chunks_with_mode(ws: Workspace) -> None:
    ws.write_raw("big.bin", b"old")
    ws.chmod_raw("big.bin", 0o600)
    await write_chunks(ws.ops, ws.path("big.bin"), _pieces(b"a" * 70_000, b"b"), mode=0o640)
    assert ws.read_raw("big.bin") == b"a" * 70_000 + b"b"
    assert ws.mode_raw("big.bin") == 0o640
    await write_chunks(ws.ops, ws.path("new.bin"), _pieces(b"x"), mode=0o400)
    assert ws.mode_raw("new.bin") == 0o400


async def test_content_larger_than_a_message_arrives_whole_with_its_mode(ws: Workspace) -> None:
    """Above one wire message (``CHUNK_BYTES``) a write is streamed in pieces on the remote
    backends: every piece arrives, in order, and the mode and size announced before them hold."""
    content = bytes(range(256)) * (2 * CHUNK_BYTES // 256) + b"end"
    await ws.ops.write_file(ws.path("large.bin"), content, mode=0o604)
    assert ws.read_raw("large.bin") == content
    assert ws.mode_raw("large.bin") == 0o604
    pieces = _pieces(
        b"", content[:7], content[7 : CHUNK_BYTES + 9], b"", content[CHUNK_BYTES + 9 :]
    )
    await write_chunks(ws.ops, ws.path("pieces.bin"), pieces, mode=0o640)
    assert ws.read_raw("pieces.bin") == content
    assert ws.mode_raw("pieces.bin") == 0o640


@pytest.mark.parametrize("mode", [-1, 0o1000, 0o4755])
async def test_a_mode_out_of_range_is_refused_and_nothing_is_written(
    ws: Workspace, mode: int
) -> None:
    ws.write_raw("keep.txt", b"old")
    ws.chmod_raw("keep.txt", 0o644)
    with pytest.raises(InvalidArgument, match="`mode` must be permission bits"):
        await ws.ops.write_file(ws.path("keep.txt"), b"new", mode=mode)
    with pytest.raises(InvalidArgument, match="`mode` must be permission bits"):
        await write_chunks(ws.ops, ws.path("keep.txt"), _pieces(b"new"), mode=mode)
    with pytest.raises(InvalidArgument, match="`mode` must be permission bits"):
        await ws.ops.write_file(ws.path("fresh.txt"), b"new", mode=mode)
    assert ws.read_raw("keep.txt") == b"old"
    assert ws.mode_raw("keep.txt") == 0o644
    assert not ws.exists_raw("fresh.txt")
