"""The ``Frames`` stream: framed calls on pooled gRPC streams, as the gRPC client runs its calls.

Checked here: execs and the other calls reuse a few long-lived streams instead of one RPC each;
a call the broker never answers ends at ``call_timeout`` and is cancelled on the broker; a stream without a
token is refused before anything runs; hostile bytes and unknown methods end defined; shutdown
does not wait for idle streams; a broker that never reports is given up on after the timeout plus
the grace.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opsbroker.v1 import broker_pb2 as pb
from opsbroker.v1 import broker_pb2_grpc as pb_grpc
from opsbroker.v1.codec import CHUNK_BYTES
from opsbroker.v1.sshframe import (
    NEED_DATA,
    End,
    EndOfInput,
    FrameConnection,
    Message,
    Request,
    Role,
)

from agent_side import connect
from broker._frontends.grpc import BrokerServicer
from operations import ExecResult, InMemoryOperations, Timeout, Unavailable

from ._harness import client, serving, token_of

pytestmark = pytest.mark.anyio


def _count_streams(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many ``Frames`` streams the broker opens, from now on (one list entry each)."""
    opened: list[int] = []
    served = BrokerServicer.Frames

    async def counted(self: BrokerServicer, requests: object, context: Any) -> None:
        opened.append(1)
        await served(self, requests, context)

    monkeypatch.setattr(BrokerServicer, "Frames", counted)
    return opened


async def test_execs_reuse_a_few_streams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened = _count_streams(monkeypatch)
    async with serving(tmp_path, None) as server, client(server) as ops:
        out: list[bytes] = []
        for i in range(20):
            result = await ops.exec(f"echo {i}", ops.root, on_data=out.append)
            assert result == ExecResult(0, None)
        assert b"".join(out) == b"".join(f"{i}\n".encode() for i in range(20))
        assert len(opened) == 1  # one stream carried all twenty, one after the other
        results = await asyncio.gather(
            *(ops.exec("sleep 0.2", ops.root, on_data=lambda _: None) for _ in range(4))
        )
        assert results == [ExecResult(0, None)] * 4
        assert len(opened) <= 4  # four at once need four streams, the idle one among them


async def test_every_kind_of_call_shares_the_pooled_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = _count_streams(monkeypatch)
    big = os.urandom(3 * CHUNK_BYTES + 7)  # streamed by the ReadFile RPC, beside the stream
    async with serving(tmp_path, None) as server, client(server) as ops:
        root = ops.root
        await ops.write_file(f"{root}/a.txt", b"needle\n")
        await ops.mkdir(f"{root}/d")
        (tmp_path / "ROOT" / "big").write_bytes(big)
        assert await ops.read_file(f"{root}/a.txt") == b"needle\n"
        assert await ops.read_file(f"{root}/big") == big
        assert [c async for c in ops.read_chunks(f"{root}/big")] != []
        assert (await ops.stat(f"{root}/a.txt")).size == 7
        assert await ops.exists(f"{root}/d") and await ops.is_directory(f"{root}/d")
        assert sorted(await ops.readdir(root)) == ["a.txt", "big", "d"]
        assert {e.name for e in await ops.list_dir(root)} == {"a.txt", "big", "d"}
        assert await ops.glob("*.txt", root) == ["a.txt"]
        assert [m.path async for m in ops.search("needle", root)] == [f"{root}/a.txt"]
        await ops.rename(f"{root}/a.txt", f"{root}/b.txt")
        await ops.remove(f"{root}/d")
        assert await ops.exec("true", root, on_data=lambda _: None) == ExecResult(0, None)
        assert len(opened) == 1  # one stream carried every call, one after the other


class _Held(InMemoryOperations):
    """A backend whose ``stat`` and ``exec`` never answer until ``release`` (whatever an exec's
    timeout says); a wait that is cancelled sets ``cancelled``."""

    def __init__(self) -> None:
        super().__init__({"f": b"x"}, root="/w")
        self.release = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def _held(self) -> None:
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    async def stat(self, path: str) -> Any:
        await self._held()
        return await super().stat(path)

    async def exec(self, command: str, cwd: str, **_: object) -> ExecResult:
        await self._held()
        return ExecResult(0, None)


@asynccontextmanager
async def _held_client(tmp_path: Path, **options: object) -> AsyncIterator[tuple[_Held, Any]]:
    """A client of a broker over :class:`_Held`, released at the end (so shutdown is prompt)."""
    backend = _Held()
    async with serving(tmp_path, backend) as server:
        try:
            async with client(server, **options) as ops:
                yield backend, ops
        finally:
            backend.release.set()


async def test_a_call_the_broker_never_answers_times_out_and_is_cancelled_there(
    tmp_path: Path,
) -> None:
    async with _held_client(tmp_path, call_timeout=0.3) as (backend, ops):
        started = time.monotonic()
        with pytest.raises(Timeout, match=r"did not finish within 0\.3 s"):
            await ops.stat("/w/f")
        assert 0.25 <= time.monotonic() - started < 3.0
        await asyncio.wait_for(backend.cancelled.wait(), 5)  # the broker stopped it
        assert await ops.read_file("/w/f") == b"x"  # and serves on


@asynccontextmanager
async def _raw_frames(address: str, token: str | None) -> AsyncIterator[Any]:
    metadata = (("authorization", f"Bearer {token}"),) if token is not None else ()
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
        yield stub.Frames(metadata=metadata, timeout=10)


async def _events(call: Any, frames: FrameConnection) -> list[object]:
    """Every frame the broker sends until it sends END (or ends the stream)."""
    events: list[object] = []
    while True:
        message = await call.read()
        if message is grpc.aio.EOF:
            return events
        frames.receive_data(message.data)
        while (event := frames.next_event()) is not NEED_DATA:
            events.append(event)
            if isinstance(event, End):
                return events


def _run_request(frames: FrameConnection, command: str) -> pb.FrameBytes:
    request = pb.ExecRequest(command=command, cwd="/w", abort_id="a")
    data = frames.send(Request("Run", request.SerializeToString())) + frames.send(EndOfInput())
    return pb.FrameBytes(data=data)


@pytest.mark.parametrize("token", [None, "wrong-token"])
async def test_a_stream_without_a_valid_token_runs_nothing(
    tmp_path: Path, token: str | None
) -> None:
    memory = InMemoryOperations(root="/w")
    async with serving(tmp_path, memory) as server, _raw_frames(server.addresses[0], token) as call:
        with pytest.raises(grpc.aio.AioRpcError) as caught:  # at the write, if refused by then
            await call.write(_run_request(FrameConnection(Role.CLIENT), "touch x"))
            await call.read()
        assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert memory.commands.history == []


async def test_calls_on_one_stream_run_in_turn_as_the_streams_principal(tmp_path: Path) -> None:
    memory = InMemoryOperations(root="/w")
    memory.commands.register(lambda command: True, output="ran\n")
    async with (
        serving(tmp_path, memory) as server,
        _raw_frames(server.addresses[0], token_of(server)) as call,
    ):
        frames = FrameConnection(Role.CLIENT)
        for _ in range(3):
            await call.write(_run_request(frames, "anything"))
            events = await _events(call, frames)
            assert isinstance(events[-1], End) and events[-1].ok
            assert all(isinstance(e, Message) for e in events[:-1])
            replies = [pb.ExecEvent.FromString(e.message) for e in events[:-1]]  # type: ignore[attr-defined]
            assert [r.WhichOneof("event") for r in replies] == ["output", "exit"]
            frames.start_next_call()
        # an unknown method is answered, and the stream still serves
        await call.write(
            pb.FrameBytes(data=frames.send(Request("Nope", b"")) + frames.send(EndOfInput()))
        )
        (end,) = await _events(call, frames)
        assert isinstance(end, End)
        assert pb.ErrorDetail.FromString(end.error).code == "invalid_argument"
    assert memory.commands.history == ["anything"] * 3


async def test_a_consumer_slower_than_the_timeout_still_gets_the_exit(tmp_path: Path) -> None:
    """The client gives up on a broker silent past the exec's timeout plus ``exec_grace``; time
    its own ``on_data`` takes is not the broker's silence. The command ends within its timeout,
    its output waits in transit, and a consumer that takes longer than the timeout plus the grace
    gets all of it and the exit (before, ``Unavailable``: "the broker did not report")."""
    got: list[bytes] = []

    async def slow(chunk: bytes) -> None:
        got.append(chunk)
        await asyncio.sleep(0.6)

    async with serving(tmp_path, None) as server, client(server, exec_grace=0.3) as ops:
        command = "for i in 1 2 3 4 5 6; do echo $i; sleep 0.05; done"
        started = time.monotonic()
        result = await ops.exec(command, ops.root, on_data=slow, timeout=0.5)
        took = time.monotonic() - started
    assert result == ExecResult(0)
    assert b"".join(got) == b"1\n2\n3\n4\n5\n6\n"
    assert took > 0.5 + 0.3 + 0.3  # the consumer held the call well past the deadline


@pytest.fixture(scope="module")
async def memory_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    memory = InMemoryOperations(root="/w")
    memory.commands.register(lambda command: True, output="ran\n")
    async with serving(tmp_path_factory.mktemp("frames"), memory) as server:
        yield server


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(pieces=st.lists(st.binary(max_size=200), min_size=1, max_size=4))
async def test_hostile_bytes_end_the_stream_and_the_broker_serves_on(
    memory_server: Any, pieces: list[bytes]
) -> None:
    server = memory_server
    async with _raw_frames(server.addresses[0], token_of(server)) as call:
        raced = False  # a write that meets the ended stream gets grpc's own INTERNAL
        for piece in pieces:
            if call.done():
                break
            try:
                await call.write(pb.FrameBytes(data=piece))
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                raced = True
                break
        if not call.done():
            with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                await call.done_writing()
        code, details = await call.code(), await call.details()
        if not (raced and code is grpc.StatusCode.INTERNAL):
            assert code in (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT), (code, details)
            if code is grpc.StatusCode.INVALID_ARGUMENT:
                assert details.startswith("Frames: ")
    async with client(server) as ops:
        assert await ops.exec("echo", "/w", on_data=lambda _: None) == ExecResult(0, None)


async def test_shutdown_does_not_wait_for_idle_streams(tmp_path: Path) -> None:
    async with serving(tmp_path, None, shutdown_grace=10.0) as server, client(server) as ops:
        assert await ops.exec("true", ops.root, on_data=lambda _: None) == ExecResult(0, None)
        started = time.monotonic()
        await server.stop()
        assert time.monotonic() - started < 3.0  # not the 10 s grace
        with pytest.raises(Unavailable):
            await asyncio.wait_for(ops.exec("true", ops.root, on_data=lambda _: None), 10)


async def test_a_broker_that_never_reports_is_given_up_after_timeout_and_grace(
    tmp_path: Path,
) -> None:
    async with _held_client(tmp_path, exec_grace=0.3) as (_, ops):
        started = time.monotonic()
        with pytest.raises(Unavailable, match=r"did not report within the 0\.2 s timeout"):
            await ops.exec("x", "/w", on_data=lambda _: None, timeout=0.2)
        assert 0.45 <= time.monotonic() - started < 3.0
        assert await ops.exists("/w")  # the connection still serves


async def test_a_malformed_frame_is_answered_invalid_argument(memory_server: Any) -> None:
    server = memory_server
    async with _raw_frames(server.addresses[0], token_of(server)) as call:
        await call.write(pb.FrameBytes(data=b"\xff\xff\xff\xff\x01"))  # a 4 GiB frame
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call.read()
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "frame too large" in (caught.value.details() or "")


async def test_a_message_that_is_not_frame_bytes_is_answered_invalid_argument(
    memory_server: Any,
) -> None:
    server = memory_server
    metadata = (("authorization", f"Bearer {token_of(server)}"),)
    async with grpc.aio.insecure_channel(server.addresses[0]) as channel:
        call = channel.stream_stream("/opsbroker.v1.Broker/Frames")(metadata=metadata, timeout=10)
        await call.write(b"\x0a\xff")  # field 1, its length cut short
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call.read()
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "not FrameBytes" in (caught.value.details() or "")


async def test_a_broker_without_frames_is_named_as_the_reason() -> None:
    """A broker that answers Capabilities but has no Frames method (an older one): exec fails
    with Unavailable saying so, and nothing hangs."""

    async def capabilities(request: bytes, context: Any) -> bytes:
        return pb.CapabilitiesReply(version="0", root="/w").SerializeToString()

    handlers = {"Capabilities": grpc.unary_unary_rpc_method_handler(capabilities)}
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("opsbroker.v1.Broker", handlers),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with connect(f"grpc://127.0.0.1:{port}", token="t") as ops:
            with pytest.raises(Unavailable, match="does not offer Frames"):
                await asyncio.wait_for(ops.exec("true", "/w", on_data=lambda _: None), 10)
    finally:
        await server.stop(None)


class _Written:
    """A servicer context that keeps what the carrier writes (serialized ``FrameBytes``)."""

    def __init__(self) -> None:
        self.messages: list[bytes] = []

    async def write(self, message: bytes) -> None:
        self.messages.append(message)


async def test_the_carrier_sends_queued_parts_in_order_in_bounded_messages() -> None:
    from broker._frontends._grpcframes import MAX_PIECE_BYTES, StreamCarrier

    data = os.urandom(3 * MAX_PIECE_BYTES + 12345)
    view = memoryview(data)
    # frames' parts as FrameServer queues them: headers, small replies, views of big output
    parts: list[bytes | memoryview] = [b"\x00\x00\x00\x05\x02", view[:7], view[7:300_000]]
    parts += [view[300_000:2_500_000], data[2_500_000:]]
    context = _Written()
    carrier = StreamCarrier(context)  # type: ignore[arg-type]
    carrier.writelines(parts[:3])
    carrier.writelines(parts[3:])
    carrier.close()
    await asyncio.wait_for(carrier.writer, 10)
    received = []
    for message in context.messages:
        piece = pb.FrameBytes.FromString(message).data
        assert 0 < len(piece) <= MAX_PIECE_BYTES
        received.append(piece)
    assert b"".join(received) == b"".join(parts)
    assert [len(p) for p in received[:-1]] == [MAX_PIECE_BYTES] * (len(received) - 1)
