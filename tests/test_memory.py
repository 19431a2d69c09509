"""The memory backend's own features: seeding, snapshot, the log, the scripted runner, limits."""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path

import pytest

from agent_side import connect
from operations import (
    Backend,
    CommandContext,
    Dir,
    ExecResult,
    Fifo,
    File,
    FileKind,
    InMemoryOperations,
    InvalidArgument,
    KillReason,
    NotFound,
    NotRegularFile,
    OpRecord,
    Symlink,
    TooLarge,
    TooManyLinks,
    Unavailable,
)
from operations._vfs import MAX_SYMLINKS


def sink() -> tuple[list[bytes], object]:
    chunks: list[bytes] = []
    return chunks, chunks.append


async def test_seed_from_dict_and_snapshot() -> None:
    ops = InMemoryOperations(
        {
            "src/a.py": b"print(1)\n",
            "text.txt": "héllo",
            "run.sh": File(b"#!/bin/sh\n", 0o755),
            "link": Symlink("src"),
            "empty/": Dir(),
            "private/": Dir(0o700),
            "pipe": Fifo(),
            "/outside/decoy": b"not in the snapshot",
        }
    )
    assert isinstance(ops, Backend)
    assert await ops.read_file("/workspace/link/a.py") == b"print(1)\n"
    assert await ops.read_file("/workspace/text.txt") == "héllo".encode()
    assert ops.snapshot() == {
        "empty/": Dir(),
        "link": Symlink("src"),
        "pipe": Fifo(),
        "private/": Dir(0o700),
        "run.sh": b"#!/bin/sh\n",
        "src/a.py": b"print(1)\n",
        "text.txt": "héllo".encode(),
    }
    detailed = ops.snapshot(modes=True)
    assert detailed["run.sh"] == File(b"#!/bin/sh\n", 0o755)
    assert detailed["src/"] == Dir(0o755)
    with pytest.raises(NotRegularFile):
        await ops.read_file("/workspace/pipe")


async def test_snapshot_round_trips() -> None:
    ops = InMemoryOperations({"a/b": b"1", "l": Symlink("../x"), "e/": Dir()})
    await ops.write_file("/workspace/a/c", b"2")
    copy = InMemoryOperations(ops.snapshot(modes=True))
    assert copy.snapshot(modes=True) == ops.snapshot(modes=True)


async def test_seed_rejects_unknown_values() -> None:
    with pytest.raises(TypeError):
        InMemoryOperations({"x": 3})  # type: ignore[dict-item]


async def test_from_directory(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_bytes(b"a")
    (tmp_path / "tool").write_bytes(b"#!")
    (tmp_path / "tool").chmod(0o750)
    (tmp_path / "empty").mkdir()
    os.symlink("src/a.py", tmp_path / "link")
    ops = InMemoryOperations.from_directory(tmp_path, root="/repo")
    assert ops.root == "/repo"
    assert ops.snapshot() == {
        "empty/": Dir(),
        "link": Symlink("src/a.py"),
        "src/a.py": b"a",
        "tool": b"#!",
    }
    assert (await ops.stat("/repo/tool")).mode == 0o750
    assert await ops.read_file("/repo/link") == b"a"


async def test_log_records_every_operation() -> None:
    ops = InMemoryOperations({"a": b"x"})
    ops.commands.register("true")
    await ops.read_file("/workspace/a")
    with pytest.raises(NotFound):
        await ops.read_file("/workspace/missing")
    await ops.rename("/workspace/a", "/workspace/b")
    await ops.glob("*", "/workspace")
    await ops.exec("true", "/workspace", on_data=lambda _: None)
    await ops.exec("false", "/workspace", on_data=lambda _: None)
    assert ops.log == [
        OpRecord("read_file", "/workspace/a", "ok"),
        OpRecord("read_file", "/workspace/missing", "not_found"),
        OpRecord("rename", "/workspace/a", "ok", "/workspace/b"),
        OpRecord("glob", "/workspace", "ok", "*"),
        OpRecord("exec", "/workspace", "exit:0", "true"),
        OpRecord("exec", "/workspace", "exit:127", "false"),
    ]
    assert ops.commands.history == ["true", "false"]


async def test_runner_matching_rules() -> None:
    ops = InMemoryOperations()
    ops.commands.register("make", output="exact\n")
    ops.commands.register(
        re.compile(r"exit (\d+)"), lambda ctx: int(ctx.match[1]) if ctx.match else 0
    )
    ops.commands.register(lambda c: c.startswith("npm "), output=b"npm\n", exit_code=2)
    ops.commands.register("make", output="overridden\n")

    async def run(command: str) -> tuple[ExecResult, bytes]:
        chunks: list[bytes] = []
        result = await ops.exec(command, "/workspace", on_data=chunks.append)
        return result, b"".join(chunks)

    assert await run("make") == (ExecResult(0), b"overridden\n")
    assert await run("exit 42") == (ExecResult(42), b"")
    assert await run("npm test") == (ExecResult(2), b"npm\n")
    assert await run("make all") == (ExecResult(127), b"bash: make: command not found\n")
    assert await run("a | b") == (ExecResult(127), b"bash: line 1: a: command not found\n")
    assert await run("") == (ExecResult(0), b"")
    ops.commands.clear()
    assert (await run("make"))[0] == ExecResult(127)


async def test_handler_sees_cwd_env_and_can_change_files() -> None:
    ops = InMemoryOperations({"d/": Dir()})
    seen: list[CommandContext] = []

    async def touch(ctx: CommandContext) -> int:
        seen.append(ctx)
        await ctx.backend.write_file(f"{ctx.cwd}/made", ctx.env["CONTENT"])
        return 0

    ops.commands.register("touch made", touch)
    result = await ops.exec(
        "touch made", "/workspace/d", on_data=lambda _: None, env={"CONTENT": "c"}
    )
    assert result == ExecResult(0)
    assert seen[0].cwd == "/workspace/d" and seen[0].command == "touch made"
    assert ops.snapshot()["d/made"] == b"c"


async def test_sync_handler_and_bad_return() -> None:
    ops = InMemoryOperations()
    ops.commands.register("sync", lambda ctx: 5)
    ops.commands.register("bad", lambda ctx: "nope")  # type: ignore[arg-type,return-value]
    assert await ops.exec("sync", "/workspace", on_data=lambda _: None) == ExecResult(5)
    with pytest.raises(TypeError):
        await ops.exec("bad", "/workspace", on_data=lambda _: None)


async def test_tight_emit_loop_is_still_killed_by_timeout() -> None:
    ops = InMemoryOperations()

    async def spam(ctx: CommandContext) -> int:
        while True:
            await ctx.emit(b"y\n")

    ops.commands.register("yes", spam)
    started = time.monotonic()
    result = await ops.exec("yes", "/workspace", on_data=lambda _: None, timeout=0.2)
    assert result == ExecResult(None, KillReason.TIMEOUT)
    assert time.monotonic() - started < 5


async def test_output_limit() -> None:
    ops = InMemoryOperations(max_output_bytes=10)

    async def chatty(ctx: CommandContext) -> int:
        for _ in range(100):
            await ctx.emit(b"1234")
        return 0

    ops.commands.register("chatty", chatty)
    chunks: list[bytes] = []
    result = await ops.exec("chatty", "/workspace", on_data=chunks.append)
    assert result == ExecResult(None, KillReason.OUTPUT_LIMIT)
    assert b"".join(chunks) == b"1234123412"
    assert ops.log[-1].outcome == "killed:output_limit"


async def test_time_scale_runs_scripts_fast_with_same_outcome() -> None:
    ops = InMemoryOperations(time_scale=0.001)

    async def slow(ctx: CommandContext) -> int:
        for i in range(3):
            await ctx.emit(f"{i}\n")
            await ctx.sleep(10)
        return 0

    ops.commands.register("slow", slow)
    started = time.monotonic()
    chunks: list[bytes] = []
    assert await ops.exec("slow", "/workspace", on_data=chunks.append, timeout=60) == ExecResult(0)
    assert b"".join(chunks) == b"0\n1\n2\n"
    assert await ops.exec("slow", "/workspace", on_data=lambda _: None, timeout=15) == ExecResult(
        None, KillReason.TIMEOUT
    )
    assert time.monotonic() - started < 5


async def test_aclose_kills_running_commands_with_shutdown() -> None:
    ops = InMemoryOperations()
    cleaned = asyncio.Event()

    async def forever(ctx: CommandContext) -> int:
        try:
            await ctx.sleep(30)
        finally:
            cleaned.set()
        return 0

    ops.commands.register("forever", forever)
    task = asyncio.create_task(ops.exec("forever", "/workspace", on_data=lambda _: None))
    await asyncio.sleep(0.01)
    await ops.aclose()
    assert await asyncio.wait_for(task, 5) == ExecResult(None, KillReason.SHUTDOWN)
    assert cleaned.is_set()
    with pytest.raises(Unavailable):
        await ops.stat("/workspace")


async def test_powershell_runner() -> None:
    ops = InMemoryOperations()
    ops.powershell.commands.register("Get-Date", output="today\r\n")
    chunks: list[bytes] = []
    assert await ops.powershell.exec("Get-Date", "/workspace", on_data=chunks.append) == ExecResult(
        0
    )
    assert await ops.powershell.exec("echo hi", "/workspace", on_data=chunks.append) == ExecResult(
        1
    )
    assert b"".join(chunks).startswith(b"today\r\necho: The term 'echo' is not recognized")
    assert [r.op for r in ops.log] == ["powershell", "powershell"]


async def test_size_limits() -> None:
    ops = InMemoryOperations({"big": b"x" * 11}, max_read_bytes=10, max_write_bytes=10)
    with pytest.raises(TooLarge):
        await ops.read_file("/workspace/big")
    with pytest.raises(TooLarge):
        await ops.write_file("/workspace/new", b"y" * 11)
    await ops.write_file("/workspace/new", b"y" * 10)


async def test_link_bound() -> None:
    """Linux follows at most 40 links in one lookup: l1 needs 40, l0 needs 41."""
    files = {f"l{i}": Symlink(f"l{i + 1}") for i in range(MAX_SYMLINKS + 1)}
    ops = InMemoryOperations({**files, f"l{MAX_SYMLINKS + 1}": b"end"})
    assert await ops.read_file("/workspace/l1") == b"end"
    with pytest.raises(TooManyLinks):
        await ops.read_file("/workspace/l0")
    assert (await ops.lstat("/workspace/l0")).kind is FileKind.SYMLINK


async def test_connect_memory() -> None:
    async with connect("memory:") as ops:
        assert ops.root == "/workspace"
    ops2 = connect("memory:/srv/ws", max_output_bytes=5)
    assert ops2.root == "/srv/ws"
    assert isinstance(ops2, InMemoryOperations) and ops2.max_output_bytes == 5
    with pytest.raises(InvalidArgument):
        connect("memory://host/x")
    with pytest.raises(InvalidArgument):
        connect("memory:", bogus=1)
    with pytest.raises(InvalidArgument, match="unknown backend scheme"):
        connect("nosuch://x")


async def test_bad_root() -> None:
    with pytest.raises(ValueError):
        InMemoryOperations(root="relative")
    with pytest.raises(ValueError):
        InMemoryOperations(root="/a/../b")
