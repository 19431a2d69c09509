"""Small writes over gRPC: content of at most one chunk goes by the unary ``WriteSmallFile``, larger
content by the ``WriteFile`` stream; both write the same bytes and mode, and the broker refuses a
``WriteSmallFile`` above one chunk."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import grpc
import grpc.aio
import pytest
from opsbroker.v1 import broker_pb2 as pb
from opsbroker.v1.codec import CHUNK_BYTES, ERROR_METADATA_KEY

from broker._audit import read_records
from operations import InvalidArgument

from ._harness import client, count_calls, serving

pytestmark = pytest.mark.anyio

SIZES = [0, 1, 4096, CHUNK_BYTES - 1, CHUNK_BYTES, CHUNK_BYTES + 1, 2 * CHUNK_BYTES + 3]


async def test_content_of_one_chunk_goes_by_one_unary_call_and_larger_content_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = count_calls(monkeypatch, "WriteSmallFile", "WriteFile")
    audit = tmp_path / "audit.jsonl"
    async with serving(tmp_path, None, audit_log=audit) as server, client(server) as ops:
        for size in SIZES:
            data = os.urandom(size)
            before = calls.copy()
            await ops.write_file(f"{ops.root}/f{size}", data, mode=0o640)
            method = "WriteSmallFile" if size <= CHUNK_BYTES else "WriteFile"
            assert calls - before == {method: 1}, (size, calls - before)
            written = tmp_path / "ROOT" / f"f{size}"
            assert written.read_bytes() == data
            assert stat.S_IMODE(written.stat().st_mode) == 0o640
        await ops.write_file(f"{ops.root}/f1", "é")  # str content; a replaced file keeps its mode
        assert (tmp_path / "ROOT" / "f1").read_bytes() == "é".encode()
        assert stat.S_IMODE((tmp_path / "ROOT" / "f1").stat().st_mode) == 0o640
    writes = [r for r in read_records([audit]) if r.get("op") == "write_file"]
    assert [(r["decision"], r["bytes_in"]) for r in writes] == [
        *[("allow", size) for size in SIZES],
        ("allow", 2),
    ]


async def test_the_boundary_sizes_round_trip_through_the_client(tmp_path: Path) -> None:
    async with serving(tmp_path, None) as server, client(server) as ops:
        for size in (CHUNK_BYTES, CHUNK_BYTES + 1):
            data = os.urandom(size)
            await ops.write_file(f"{ops.root}/edge", data)
            assert await ops.read_file(f"{ops.root}/edge") == data


async def test_a_raw_write_small_above_one_chunk_is_refused_and_writes_nothing(
    tmp_path: Path,
) -> None:
    audit = tmp_path / "audit.jsonl"
    async with serving(tmp_path, None, audit_log=audit) as server, client(server) as ops:
        stub = await ops._ensure()
        path = f"{ops.root}/too-big"
        request = pb.WriteSmallFileRequest(path=path, data=b"x" * (CHUNK_BYTES + 1))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.WriteSmallFile(request, metadata=ops._metadata, timeout=30)
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        detail = dict(caught.value.trailing_metadata() or ())[ERROR_METADATA_KEY]
        error = pb.ErrorDetail.FromString(detail)
        assert (error.code, error.op, error.path) == ("invalid_argument", "write_file", path)
        assert error.reason == (
            f"WriteSmallFile carries at most {CHUNK_BYTES} bytes, got {CHUNK_BYTES + 1}; "
            "use WriteFile for larger content"
        )
        # The broker's error type survives the wire, as for every other refusal.
        with pytest.raises(InvalidArgument, match="use WriteFile"):
            await ops._change("write_file", path, "WriteSmallFile", request)
        exact = pb.WriteSmallFileRequest(path=path, data=b"y" * CHUNK_BYTES)
        await stub.WriteSmallFile(exact, metadata=ops._metadata, timeout=30)
    assert (tmp_path / "ROOT" / "too-big").read_bytes() == b"y" * CHUNK_BYTES
    writes = [r for r in read_records([audit]) if r.get("op") == "write_file"]
    assert [(r["decision"], r["bytes_in"]) for r in writes] == [("allow", CHUNK_BYTES)]
