"""Small writes over SSH: content of at most one piece goes by the unary ``WriteSmallFile``, larger
content by the ``WriteFile`` stream, as over gRPC; both write the same bytes and mode."""

from __future__ import annotations

import dataclasses
import os
import stat
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agent_side._remote.ssh import WRITE_CHUNK_BYTES
from broker._frontends import _service

from ._harness import broker_over_ssh

pytestmark = pytest.mark.anyio

SIZES = [0, 4096, WRITE_CHUNK_BYTES, WRITE_CHUNK_BYTES + 1, 3 * WRITE_CHUNK_BYTES]


def _count(monkeypatch: pytest.MonkeyPatch, *names: str) -> Counter[str]:
    """How often each of ``names`` reaches the service's method table (which the SSH subsystem
    looks up per call)."""
    counts: Counter[str] = Counter()
    for name in names:
        method = _service.METHODS[name]

        async def counted(*args: Any, _method: Any = method, _name: str = name) -> None:
            counts[_name] += 1
            await _method.handler(*args)

        monkeypatch.setitem(_service.METHODS, name, dataclasses.replace(method, handler=counted))
    return counts


async def test_content_of_one_piece_goes_by_one_unary_call_and_larger_content_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _count(monkeypatch, "WriteSmallFile", "WriteFile")
    root = tmp_path / "root"
    root.mkdir()
    async with broker_over_ssh(tmp_path, str(root)) as (_, ops):
        for size in SIZES:
            data = os.urandom(size)
            before = calls.copy()
            await ops.write_file(f"{ops.root}/f{size}", data, mode=0o640)
            method = "WriteSmallFile" if size <= WRITE_CHUNK_BYTES else "WriteFile"
            assert calls - before == {method: 1}, (size, calls - before)
            written = root / f"f{size}"
            assert written.read_bytes() == data
            assert stat.S_IMODE(written.stat().st_mode) == 0o640
