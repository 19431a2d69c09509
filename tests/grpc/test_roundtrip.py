"""Every Operations member over gRPC against the memory backend: values and errors survive."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from operations import (
    AbortController,
    EscapesRoot,
    ExecResult,
    FileKind,
    InMemoryOperations,
    InvalidArgument,
    IsADirectory,
    KillReason,
    NotFound,
    Unavailable,
)
from operations._memory import Symlink

from ._harness import client, serving


async def test_file_operations_round_trip(tmp_path: Path) -> None:
    memory = InMemoryOperations({"a.txt": b"hello\n", "d/b.txt": b"x", "ln": Symlink("a.txt")})
    async with serving(tmp_path, memory) as server, client(server) as ops:
        root = ops.root
        assert root == "/workspace"
        assert await ops.read_file(f"{root}/a.txt") == b"hello\n"
        big = bytes(range(256)) * 1000  # several chunks
        await ops.write_file(f"{root}/big", big)
        assert await ops.read_file(f"{root}/big") == big
        await ops.write_file(f"{root}/empty", b"")
        assert await ops.read_file(f"{root}/empty") == b""
        await ops.mkdir(f"{root}/x/y")
        assert await ops.is_directory(f"{root}/x/y")
        assert await ops.exists(f"{root}/a.txt")
        assert not await ops.exists(f"{root}/nope")
        st = await ops.stat(f"{root}/ln")
        assert st.kind is FileKind.FILE and st.size == 6
        assert (await ops.lstat(f"{root}/ln")).kind is FileKind.SYMLINK
        assert sorted(await ops.readdir(f"{root}/d")) == ["b.txt"]
        entries = {e.name: e.kind for e in await ops.list_dir(root)}
        assert entries["d"] is FileKind.DIRECTORY and entries["ln"] is FileKind.SYMLINK
        assert await ops.glob("**/*.txt", root) == ["a.txt", "d/b.txt"]
        matches = [m async for m in ops.search("hel+o", root)]
        assert [(m.path, m.line_number, m.line_text) for m in matches] == [
            (f"{root}/a.txt", 1, "hello")
        ]
        await ops.rename(f"{root}/big", f"{root}/big2")
        await ops.remove(f"{root}/big2")
        await ops.access(f"{root}/a.txt", writable=True)
        assert await ops.detect_image_mime_type(f"{root}/a.txt") is None


async def test_errors_keep_type_op_and_path(tmp_path: Path) -> None:
    async with serving(tmp_path, InMemoryOperations({"d/": None})) as server, client(server) as ops:
        with pytest.raises(NotFound) as caught:
            await ops.read_file("/workspace/missing")
        assert caught.value.op == "read_file" and caught.value.path == "/workspace/missing"
        with pytest.raises(IsADirectory):
            await ops.read_file("/workspace/d")
        with pytest.raises(EscapesRoot):
            await ops.read_file("/workspace/../etc/passwd")


async def test_exec_streams_output_and_exit(tmp_path: Path) -> None:
    memory = InMemoryOperations()
    memory.commands.register("hi", output="hello\n", exit_code=3)
    async with serving(tmp_path, memory) as server, client(server) as ops:
        seen: list[bytes] = []
        result = await ops.exec("hi", ops.root, on_data=seen.append)
        assert result == ExecResult(3, None)
        assert b"".join(seen) == b"hello\n"


async def test_exec_timeout_is_enforced_by_the_broker(tmp_path: Path) -> None:
    memory = InMemoryOperations()

    async def forever(ctx: object) -> int:
        await ctx.sleep(3600)  # type: ignore[attr-defined]
        return 0

    memory.commands.register("forever", forever)
    async with serving(tmp_path, memory) as server, client(server) as ops:
        result = await ops.exec("forever", ops.root, on_data=lambda _: None, timeout=0.05)
        assert result == ExecResult(None, KillReason.TIMEOUT)


@pytest.mark.parametrize("tune", [True, False])
async def test_tune_allocator_is_applied_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tune: bool
) -> None:
    from agent_side._remote import grpc as grpc_backend

    calls: list[int] = []
    monkeypatch.setattr(grpc_backend.malloc, "tune_allocator", lambda: calls.append(1) or True)
    async with serving(tmp_path, None) as server:
        backend = client(server, tune_allocator=tune)
        try:
            await backend.open()
            await backend.open()  # idempotent: the channel, and the setting, are made once
        finally:
            await backend.aclose()
    assert calls == ([1] if tune else [])


async def test_tune_allocator_must_be_a_bool() -> None:
    from agent_side import connect

    with pytest.raises(InvalidArgument, match="tune_allocator must be True or False, not 'yes'"):
        connect("grpc://127.0.0.1:1", tune_allocator="yes")


async def test_a_call_past_the_brokers_call_limit_is_unavailable_and_says_why(
    tmp_path: Path,
) -> None:
    """Past ``max_concurrent_calls`` grpc answers RESOURCE_EXHAUSTED, as for a message too large:
    the client reports the limit (``Unavailable``, worth a retry), not a size."""
    async with serving(tmp_path, None, max_concurrent_calls=4) as server, client(server) as ops:
        controllers = [AbortController() for _ in range(4)]
        started = asyncio.Semaphore(0)
        running = [
            asyncio.create_task(
                ops.exec(
                    "echo start; sleep 30",
                    ops.root,
                    on_data=lambda _: started.release(),
                    signal=c.signal,
                )
            )
            for c in controllers
        ]
        try:
            for _ in running:  # the 4 calls hold the broker's 4
                await asyncio.wait_for(started.acquire(), 10)
            with pytest.raises(Unavailable, match="max_concurrent_calls"):
                await asyncio.wait_for(ops.exec("true", ops.root, on_data=lambda _: None), 10)
        finally:
            for c in controllers:
                c.abort()
            # At the limit the abort's AbortRun is refused too: each call ends when its stream is
            # cut, exec_grace later.
            ended = await asyncio.wait_for(asyncio.gather(*running, return_exceptions=True), 30)
        assert ended == [ExecResult(None, KillReason.ABORTED)] * 4
