"""Files stream through the broker in pieces: ``read_chunks`` / ``write_chunks`` on the core,
behind the policy guard, over gRPC, and on the client; a 1 GiB file round-trips through a
separate ``opsbroker serve`` process whose memory barely grows."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent_side import connect
from broker import Broker
from operations import GuardedBackend, Policy, TooLarge

from ._harness import client, serving
from ._serve_process import serve_process

MiB = 1024 * 1024
GiB = 1024 * MiB
RSS_GROWTH_LIMIT = 64 * MiB  # the bound for streaming a 1 GiB file
ROUND_TRIP_TIMEOUT_S = 240.0  # 1 GiB each way on a shared 2-core machine


class Boom(Exception):
    """Raised by a content stream that fails midway."""


async def _pattern(
    total: int, piece: int = MiB, fail_after: int | None = None
) -> AsyncIterator[bytes]:
    """``total`` bytes in ``piece``-sized pieces, each distinct (a counter in every piece)."""
    sent = 0
    index = 0
    while sent < total:
        if fail_after is not None and sent >= fail_after:
            raise Boom
        size = min(piece, total - sent)
        yield (index.to_bytes(8, "big") * (size // 8 + 1))[:size]
        sent += size
        index += 1


async def _digest(pieces: AsyncIterator[bytes]) -> tuple[str, int]:
    hasher, total = hashlib.sha256(), 0
    async for piece in pieces:
        hasher.update(piece)
        total += len(piece)
    return hasher.hexdigest(), total


async def _expected(total: int, piece: int) -> str:
    return (await _digest(_pattern(total, piece)))[0]


def _leftovers(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.startswith(".opsbroker-"))


async def test_core_streams_both_ways_and_fails_without_trace(tmp_path: Path) -> None:
    async with Broker(str(tmp_path)) as core:
        target = f"{tmp_path}/big.bin"
        await core.write_chunks(target, _pattern(5 * MiB + 3, piece=300_000))
        assert await _digest(core.read_chunks(target, chunk_size=70_000)) == (
            await _expected(5 * MiB + 3, 300_000),
            5 * MiB + 3,
        )
        for size in (0, 10):  # small files take the inline path
            await core.write_chunks(f"{tmp_path}/small", _pattern(size))
            assert [p async for p in core.read_chunks(f"{tmp_path}/small")] == (
                [b"\0" * size] if size else []
            )
        with pytest.raises(Boom):
            await core.write_chunks(target, _pattern(5 * MiB, fail_after=3 * MiB))
        assert (await _digest(core.read_chunks(target)))[1] == 5 * MiB + 3  # old content kept
        with pytest.raises(Boom):
            await core.write_chunks(f"{tmp_path}/new.bin", _pattern(MiB, fail_after=0))
        assert not (tmp_path / "new.bin").exists()
        assert _leftovers(tmp_path) == []


async def test_core_cancelled_midway_leaves_no_file_and_no_fd(tmp_path: Path) -> None:
    (tmp_path / "big.bin").write_bytes(b"y" * (8 * MiB))
    fds = len(os.listdir("/proc/self/fd"))
    stalled = asyncio.Event()

    async def stalls() -> AsyncIterator[bytes]:
        async for piece in _pattern(3 * MiB):
            yield piece
        stalled.set()
        await asyncio.Event().wait()  # a client that never finishes its upload
        yield b""

    async with Broker(str(tmp_path)) as core:
        writing = asyncio.create_task(core.write_chunks(f"{tmp_path}/new.bin", stalls()))
        await asyncio.wait_for(stalled.wait(), 10)
        assert len(_leftovers(tmp_path)) == 1  # the temp file, beside the target
        writing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await writing
        reading = core.read_chunks(f"{tmp_path}/big.bin", chunk_size=MiB)
        assert len(await anext(reading)) == MiB
        await reading.aclose()  # stop reading midway
    assert not (tmp_path / "new.bin").exists() and _leftovers(tmp_path) == []
    assert len(os.listdir("/proc/self/fd")) == fds


@pytest.mark.parametrize("cached", [True, False])
async def test_core_reads_cached_pieces_on_the_loop_and_others_in_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cached: bool
) -> None:
    """Pieces the page cache holds are read without a thread hop; the others (forced here) in
    threads, at the right offsets either way."""
    import broker._core as core_module

    taken: list[bool] = []
    real = core_module._read_cached

    def read_cached(fd: int, buffer: bytearray, offset: int) -> bytes | None:
        piece = real(fd, buffer, offset) if cached else None
        taken.append(piece is not None)
        return piece

    monkeypatch.setattr(core_module, "_read_cached", read_cached)
    size = 3 * MiB + 12_345
    content = b"".join(i.to_bytes(4, "big") for i in range(size // 4 + 1))[:size]
    (tmp_path / "big.bin").write_bytes(content)
    async with Broker(str(tmp_path)) as core:
        pieces = [p async for p in core.read_chunks(f"{tmp_path}/big.bin", chunk_size=MiB)]
    assert b"".join(pieces) == content and max(map(len, pieces)) <= MiB
    assert taken and all(taken) is cached and any(taken) is cached


async def test_core_read_small_returns_small_files_and_declines_larger_ones(tmp_path: Path) -> None:
    from operations import IsADirectory, NotFound

    async with Broker(str(tmp_path)) as core:
        for limit in (10, 300 * 1024):  # on the loop; through the stream (above the inline size)
            for size in (0, 1, limit, limit + 1, 3 * limit):
                (tmp_path / "f").write_bytes(b"z" * size)
                got = await core.read_small(f"{tmp_path}/f", limit)
                assert got == (b"z" * size if size <= limit else None), (limit, size)
        with pytest.raises(IsADirectory):
            await core.read_small(str(tmp_path), 10)
        with pytest.raises(NotFound):
            await core.read_small(f"{tmp_path}/missing", 10)


def test_chunk_data_view_is_the_data_without_a_copy() -> None:
    from opsbroker.v1 import broker_pb2 as pb
    from opsbroker.v1.codec import chunk_data_view

    for size in (0, 1, 127, 128, 16_383, 16_384, MiB):
        data = os.urandom(size)
        raw = pb.Chunk(data=data).SerializeToString()
        view = chunk_data_view(raw)
        assert bytes(view) == data
        assert size == 0 or view.obj is raw  # a view into the received message
    unusual = b"\x10\x01" + pb.Chunk(data=b"abc").SerializeToString()  # an unknown field first
    assert bytes(chunk_data_view(unusual)) == b"abc"


async def test_guard_limits_streams_and_audits_totals(tmp_path: Path) -> None:
    root = tmp_path / "ROOT"
    root.mkdir()
    events: list[dict[str, object]] = []

    class Sink:
        healthy = True

        def record(self, event: object) -> None:
            events.append(dict(event))  # type: ignore[call-overload]

    policy = Policy(max_read_bytes=2 * MiB, max_write_bytes=2 * MiB)
    async with Broker(str(root)) as core:
        guard = GuardedBackend(core, policy, audit=Sink(), close_inner=False)
        await guard.write_chunks(f"{root}/ok.bin", _pattern(2 * MiB))
        assert (await _digest(guard.read_chunks(f"{root}/ok.bin", chunk_size=MiB)))[1] == 2 * MiB
        with pytest.raises(TooLarge):
            await guard.write_chunks(f"{root}/big.bin", _pattern(3 * MiB))
        assert not (root / "big.bin").exists() and _leftovers(root) == []
        (root / "big.bin").write_bytes(b"x" * (2 * MiB + 1))
        with pytest.raises(TooLarge):
            await _digest(guard.read_chunks(f"{root}/big.bin", chunk_size=MiB))
    assert [(e["op"], e["decision"], e.get("bytes_in"), e.get("bytes_out")) for e in events] == [
        ("write_file", "allow", 2 * MiB, None),
        ("read_file", "allow", None, 2 * MiB),
        ("write_file", "error", 2 * MiB + MiB, None),
        ("read_file", "error", None, 2 * MiB),
    ]


async def test_a_read_over_grpc_is_one_call_when_small_and_one_audit_line_either_way(
    tmp_path: Path,
) -> None:
    """A file that fits in one chunk comes back in one unary reply; a larger one is streamed
    after the broker declined it without auditing, so each read is audited exactly once."""
    from opsbroker.v1.codec import CHUNK_BYTES

    from broker._audit import read_records

    audit = tmp_path / "audit.jsonl"
    (tmp_path / "ROOT").mkdir()
    sizes = [0, 1, CHUNK_BYTES, CHUNK_BYTES + 1, 3 * CHUNK_BYTES + 7]
    for size in sizes:
        (tmp_path / "ROOT" / f"f{size}").write_bytes(os.urandom(size))
    async with serving(tmp_path, None, audit_log=audit) as server, client(server) as ops:
        for size in sizes:
            data = await ops.read_file(f"{ops.root}/f{size}")
            assert data == (tmp_path / "ROOT" / f"f{size}").read_bytes()
        small = await ops._call("read_file", ops.root, "ReadSmallFile", _path(f"{ops.root}/f1"))
        assert small.complete and small.data == (tmp_path / "ROOT" / "f1").read_bytes()
        large = f"{ops.root}/f{CHUNK_BYTES + 1}"
        declined = await ops._call("read_file", ops.root, "ReadSmallFile", _path(large))
        assert not declined.complete and not declined.data
    reads = [r for r in read_records([audit]) if r.get("op") == "read_file"]
    assert [(r["decision"], r.get("bytes_out")) for r in reads] == [
        *[("allow", size) for size in sizes],
        ("allow", 1),
    ]


def _path(path: str) -> object:
    from opsbroker.v1 import broker_pb2 as pb

    return pb.PathRequest(path=path)


async def test_grpc_client_streams_and_a_failing_stream_writes_nothing(tmp_path: Path) -> None:
    async with serving(tmp_path, None) as server, client(server) as ops:
        root = Path(ops.root)
        target = f"{root}/big.bin"
        await ops.write_chunks(target, _pattern(9 * MiB + 5, piece=100_000))
        assert await _digest(ops.read_chunks(target, chunk_size=MiB)) == (
            await _expected(9 * MiB + 5, 100_000),
            9 * MiB + 5,
        )
        assert await ops.read_file(target) == b"".join(
            [p async for p in _pattern(9 * MiB + 5, piece=100_000)]
        )
        with pytest.raises(Boom):
            await ops.write_chunks(f"{root}/half.bin", _pattern(8 * MiB, fail_after=4 * MiB))
        assert not (root / "half.bin").exists()
        await _until_no_leftovers(root)  # the broker sees the cancellation a moment later
        await ops.write_chunks(f"{root}/empty", _pattern(0))
        assert (root / "empty").read_bytes() == b""


async def _until_no_leftovers(directory: Path) -> None:
    for _ in range(500):  # at most ~5 s
        if not _leftovers(directory):
            return
        await asyncio.sleep(0.01)
    assert _leftovers(directory) == []


def _status(pid: int, field: str) -> int:
    """A ``VmRSS``-style field of ``/proc/PID/status``, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


async def test_one_gib_round_trips_through_serve_with_bounded_memory(tmp_path: Path) -> None:
    root = tmp_path / "ROOT"
    root.mkdir()
    policy = tmp_path / "policy.toml"
    policy.write_text(f"max_read_bytes = {2 * GiB}\nmax_write_bytes = {2 * GiB}\n")
    tokens = tmp_path / "state" / "tokens"
    async with serve_process(root, tokens, "--policy", str(policy)) as served:
        token = next(
            ln for ln in tokens.read_text().splitlines() if ln and not ln.startswith("#")
        ).split()[0]
        pid = served.process.pid
        async with connect(f"grpc://{served.address}", token=token) as ops:
            await ops.write_chunks(f"{root}/warm", _pattern(MiB))  # code paths loaded
            assert (await _digest(ops.read_chunks(f"{root}/warm")))[1] == MiB
            baseline = _status(pid, "VmRSS")
            async with asyncio.timeout(ROUND_TRIP_TIMEOUT_S):
                sent = hashlib.sha256()

                async def content() -> AsyncIterator[bytes]:
                    async for piece in _pattern(GiB):
                        sent.update(piece)
                        yield piece

                await ops.write_chunks(f"{root}/huge.bin", content())
                assert (root / "huge.bin").stat().st_size == GiB
                digest, total = await _digest(ops.read_chunks(f"{root}/huge.bin"))
            peak = _status(pid, "VmHWM")
        assert (digest, total) == (sent.hexdigest(), GiB)
        assert peak - baseline < RSS_GROWTH_LIMIT, f"broker RSS grew {(peak - baseline) >> 20} MiB"
        (root / "huge.bin").unlink()
    assert served.process.returncode == 0
    assert _leftovers(root) == []


async def test_stream_replies_written_serialized_are_protobufs_own_bytes(tmp_path: Path) -> None:
    """File pieces and command output leave a reply stream framed by the broker (one copy),
    not built and serialized: what the stock stub receives parses as protobuf's own messages,
    and the raw bytes of each are exactly protobuf's serialization of them."""
    import grpc.aio
    from opsbroker.v1 import broker_pb2 as pb
    from opsbroker.v1 import broker_pb2_grpc as pb_grpc
    from opsbroker.v1.codec import CHUNK_BYTES

    from ._harness import token_of

    content = os.urandom(3 * CHUNK_BYTES + 7)
    (tmp_path / "ROOT").mkdir()
    (tmp_path / "ROOT" / "f").write_bytes(content)
    async with serving(tmp_path, None) as server:
        metadata = (("authorization", f"Bearer {token_of(server)}"),)
        path = pb.PathRequest(path=str(tmp_path / "ROOT" / "f"))
        async with grpc.aio.insecure_channel(server.addresses[0]) as channel:
            stub = pb_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
            chunks = [c async for c in stub.ReadFile(path, metadata=metadata, timeout=30)]
            assert b"".join(c.data for c in chunks) == content
            assert len(chunks) == 4

            raw = channel.unary_stream(
                f"/{pb.DESCRIPTOR.services_by_name['Broker'].full_name}/ReadFile",
                request_serializer=pb.PathRequest.SerializeToString,
            )  # no deserializer: the bytes as the broker wrote them
            messages = [m async for m in raw(path, metadata=metadata, timeout=30)]
            assert messages == [c.SerializeToString() for c in chunks]

            request = pb.ExecRequest(
                command="head -c 3000000 /dev/zero | tr '\\0' x; echo; exit 3",
                cwd=str(tmp_path / "ROOT"),
            )
            events = [e async for e in stub.Run(request, metadata=metadata, timeout=60)]
            output = b"".join(e.output for e in events if e.WhichOneof("event") == "output")
            assert output == b"x" * 3_000_000 + b"\n"
            assert events[-1].WhichOneof("event") == "exit" and events[-1].exit.exit_code == 3
