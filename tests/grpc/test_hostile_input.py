"""Malformed and hostile requests: the broker answers each with a defined status, touches nothing
outside the root, and keeps serving.

Thousands of requests in all: random bytes to every method, hostile paths (NUL bytes, ``..``,
absolute escapes, huge names), negative and huge limits, unknown enum values, NaN and infinite
timeouts, write streams without a path, with a wrong size, cut short, or never finished, and
unary writes (WriteSmallFile) to hostile paths.
File operations go to the broker core over a temporary root; commands go to the memory backend,
so no generated text is ever run by a shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opsbroker.v1 import broker_pb2 as pb

import broker._frontends._service as service
from operations import InMemoryOperations
from tests.conformance._workspace import tree_digest

from ._harness import serving, token_of

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVICE = "/opsbroker.v1.Broker/"
UNARY = ["Capabilities", "Access", "DetectImageMimeType", "Mkdir", "Exists", "Stat", "Lstat"]
UNARY += ["IsDirectory", "Remove", "Rename", "ReadSmallFile", "WriteSmallFile", "AbortRun"]
SERVER_STREAM = ["ReadFile", "Readdir", "ListDir", "Glob", "Search", "Run"]
PATH_METHODS = ["ReadFile", "Access", "DetectImageMimeType", "Mkdir", "Exists", "Stat", "Lstat"]
PATH_METHODS += ["IsDirectory", "Readdir", "ListDir", "ReadSmallFile", "WriteSmallFile"]

# What a hostile request may get back. Never UNKNOWN, never the broker's own INTERNAL.
DEFINED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
}
UNOBSERVABLE = grpc.StatusCode.UNKNOWN  # see _stream_call
CALL_TIMEOUT_S = 10.0  # per hostile request: a hang is a failure, not a slow test
EXAMPLES = 300  # per property: five properties send 1500 hostile requests, plus shrinking


@dataclass
class Target:
    core: grpc.aio.Channel
    memory: grpc.aio.Channel
    metadata: tuple[tuple[str, str], ...]
    root: str
    outside: Path


@pytest.fixture(scope="module")
async def target(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Target]:
    base = tmp_path_factory.mktemp("hostile")
    (base / "core").mkdir()
    (base / "mem").mkdir()
    outside = base / "core" / "OUTSIDE"
    outside.mkdir()
    (outside / "secret").write_bytes(b"outside secret")
    memory = InMemoryOperations()
    memory.commands.register(lambda command: True, output="ran\n")
    async with (
        serving(base / "core", None) as core_server,
        serving(base / "mem", memory) as memory_server,
    ):
        assert token_of(core_server)
        root = str(base / "core" / "ROOT")
        (base / "core" / "ROOT" / "f.txt").write_bytes(b"hello\n")
        (base / "core" / "ROOT" / "escape").symlink_to(outside / "secret")
        token = token_of(core_server)
        memory_token = token_of(memory_server)
        assert token != memory_token
        # One token table per server: give the memory server the core's token too.
        assert memory_server.tokens is not None and core_server.tokens is not None
        memory_server.tokens._entries.extend(core_server.tokens._entries)
        async with (
            grpc.aio.insecure_channel(core_server.addresses[0]) as core,
            grpc.aio.insecure_channel(memory_server.addresses[0]) as mem,
        ):
            yield Target(core, mem, (("authorization", f"Bearer {token}"),), root, outside)


def _raw(channel: grpc.aio.Channel, method: str) -> Any:
    kinds = {
        **dict.fromkeys(UNARY, channel.unary_unary),
        **dict.fromkeys(SERVER_STREAM, channel.unary_stream),
        "WriteFile": channel.stream_unary,
    }
    return kinds[method](SERVICE + method)


async def _call(target: Target, method: str, payloads: list[bytes]) -> grpc.StatusCode:
    """Send ``payloads`` (raw bytes) to ``method``; return the final status."""
    channel = target.memory if method in ("Run", "AbortRun") else target.core
    stub = _raw(channel, method)
    kwargs = {"metadata": target.metadata, "timeout": CALL_TIMEOUT_S}
    if method == "WriteFile":
        return await _stream_call(stub(**kwargs), payloads)
    try:
        if method in UNARY:
            await stub(payloads[0], **kwargs)
        else:
            async for _ in stub(payloads[0], **kwargs):
                pass
    except grpc.aio.AioRpcError as exc:
        return _checked(method, exc.code(), exc.details())
    return grpc.StatusCode.OK


async def _stream_call(call: Any, payloads: list[bytes]) -> grpc.StatusCode:
    """Write ``payloads`` one by one (stopping once the broker has answered), then the status.

    A write that meets an already-answered call makes grpc.aio replace the broker's status with
    its own "Internal error from Core"; that race is the client's, so the status is then
    :data:`UNOBSERVABLE` (the test still checks that the broker keeps serving).
    """
    raced = False
    for payload in payloads:
        if call.done():
            break
        try:
            await call.write(payload)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            raced = True
            break
    if not call.done():
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
            await call.done_writing()
    code, details = await call.code(), await call.details()
    if raced and code is grpc.StatusCode.INTERNAL and details == "Internal error from Core":
        return UNOBSERVABLE
    return _checked("stream", code, details)


def _checked(method: str, code: grpc.StatusCode, details: str | None) -> grpc.StatusCode:
    details = details or ""
    if code is grpc.StatusCode.INTERNAL and "deserializ" in details.lower():
        return grpc.StatusCode.INVALID_ARGUMENT  # grpc's own answer to undecodable bytes
    assert code in DEFINED, (method, code, details)
    return code


async def _still_serving(target: Target) -> None:
    for channel in (target.core, target.memory):
        stub = channel.unary_unary(
            SERVICE + "Capabilities",
            request_serializer=pb.CapabilitiesRequest.SerializeToString,
            response_deserializer=pb.CapabilitiesReply.FromString,
        )
        reply = await stub(pb.CapabilitiesRequest(), metadata=target.metadata, timeout=5)
        assert reply.root


ALL_METHODS = sorted([*UNARY, *SERVER_STREAM, "WriteFile"])

hostile_paths = st.one_of(
    st.text(max_size=64),
    st.sampled_from(["", "/", "..", "/..", "\0", "a\0b", "/etc/passwd", "//", "/proc/self/root"]),
    st.builds(lambda n: "/" + "../" * n + "etc/passwd", st.integers(0, 40)),
    st.builds(lambda n: "x" * n, st.integers(250, 5000)),
)


def _rooted(target: Target, tail: str, rooted: bool) -> str:
    return f"{target.root}/{tail}" if rooted else tail


common = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@common
@given(method=st.sampled_from(ALL_METHODS), payload=st.binary(max_size=300))
async def test_random_bytes_to_every_method(target: Target, method: str, payload: bytes) -> None:
    before = tree_digest(str(target.outside))
    await _call(target, method, [payload])
    assert tree_digest(str(target.outside)) == before


@common
@given(method=st.sampled_from(PATH_METHODS), tail=hostile_paths, rooted=st.booleans())
async def test_hostile_paths(target: Target, method: str, tail: str, rooted: bool) -> None:
    before = tree_digest(str(target.outside))
    path = _rooted(target, tail, rooted)
    request = pb.AccessRequest(path=path) if method == "Access" else pb.PathRequest(path=path)
    await _call(target, method, [request.SerializeToString()])
    assert tree_digest(str(target.outside)) == before


@common
@given(
    limit=st.integers(-(2**63), 2**63 - 1),
    pattern=st.text(max_size=20),
    glob=st.none() | st.text(max_size=10),
    tail=hostile_paths,
    which=st.sampled_from(["Glob", "Search"]),
)
async def test_hostile_glob_and_search(
    target: Target, limit: int, pattern: str, glob: str | None, tail: str, which: str
) -> None:
    cwd = _rooted(target, tail, True)
    if which == "Glob":
        request: Any = pb.GlobRequest(pattern=pattern, cwd=cwd, limit=limit, ignore=[pattern])
    else:
        request = pb.SearchRequest(pattern=pattern, path=cwd, limit=limit)
        if glob is not None:
            request.glob = glob
    await _call(target, which, [request.SerializeToString()])


@common
@given(
    shell=st.integers(0, 2**31 - 1),
    timeout=st.none() | st.floats(allow_nan=True, allow_infinity=True),
    command=st.text(max_size=40),
    abort_id=st.text(max_size=40),
    abort_first=st.booleans(),
)
async def test_hostile_run_requests(
    target: Target,
    shell: int,
    timeout: float | None,
    command: str,
    abort_id: str,
    abort_first: bool,
) -> None:
    if abort_first:
        await _call(target, "AbortRun", [pb.AbortRunRequest(abort_id=abort_id).SerializeToString()])
    request = pb.ExecRequest(command=command, cwd="/workspace", shell=shell, abort_id=abort_id)  # type: ignore[arg-type]
    if timeout is not None:
        request.timeout = timeout
    status = await _call(target, "Run", [request.SerializeToString()])
    valid = shell <= 2 and (timeout is None or (math.isfinite(timeout) and timeout >= 0))
    if not valid:
        assert status is grpc.StatusCode.INVALID_ARGUMENT


@common
@given(
    size=st.none() | st.integers(-(2**40), 2**40),
    pieces=st.lists(st.binary(max_size=100), max_size=5),
    path_first=st.booleans(),
)
async def test_hostile_write_streams(
    target: Target, size: int | None, pieces: list[bytes], path_first: bool
) -> None:
    written = Path(target.root, "w.txt")
    _remove(written)  # each example starts without it: a refused write must leave none
    first = pb.WriteFileRequest(path=str(written) if path_first else "")
    if size is not None:
        first.size = size
    messages = [first.SerializeToString()] + [
        pb.WriteFileRequest(data=p).SerializeToString() for p in pieces
    ]
    status = await _call(target, "WriteFile", messages)
    total = sum(map(len, pieces))
    if not path_first or (size is not None and size != total):
        assert status is grpc.StatusCode.INVALID_ARGUMENT
        assert _content(written) is None
    else:
        assert status is grpc.StatusCode.OK
        assert _content(written) == b"".join(pieces)


def _content(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)


async def test_still_serving_after_the_properties(target: Target) -> None:
    await _still_serving(target)


async def _open_write_stream(target: Target, stall: asyncio.Event) -> AsyncIterator[bytes]:
    yield pb.WriteFileRequest(
        path=f"{target.root}/stalled", size=10, data=b"12345"
    ).SerializeToString()
    await stall.wait()


async def test_a_stream_cut_short_writes_nothing(target: Target) -> None:
    stall = asyncio.Event()
    call = _raw(target.core, "WriteFile")(
        _open_write_stream(target, stall), metadata=target.metadata, timeout=CALL_TIMEOUT_S
    )
    await asyncio.sleep(0.05)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await _still_serving(target)
    assert _content(Path(target.root, "stalled")) is None


async def test_a_stream_that_never_finishes_is_ended_by_the_broker(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "STREAM_IDLE_TIMEOUT", 0.3)
    stall = asyncio.Event()
    call = _raw(target.core, "WriteFile")(
        _open_write_stream(target, stall), metadata=target.metadata
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async with asyncio.timeout(CALL_TIMEOUT_S):
            await call
    assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    stall.set()
    assert _content(Path(target.root, "stalled")) is None
    await _still_serving(target)
