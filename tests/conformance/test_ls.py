"""exists, stat, lstat, readdir, list_dir, is_directory, remove, rename on every backend."""

from __future__ import annotations

import time

import pytest

from operations import (
    DirectoryNotEmpty,
    DirEntry,
    FileKind,
    InvalidArgument,
    IsADirectory,
    NotADirectory,
    NotFound,
)
from tests.conformance._workspace import Workspace


async def test_exists(ws: Workspace) -> None:
    ws.make(["f", "d/", "link => f", "dangling => nowhere", "loop => loop"])
    for rel in ["f", "d", "link", "d/", ""]:
        assert await ws.ops.exists(ws.path(rel)), rel
    for rel in ["missing", "dangling", "loop", "f/", "f/x", "missing/x"]:
        assert not await ws.ops.exists(ws.path(rel)), rel


async def test_stat_follows_links(ws: Workspace) -> None:
    ws.make(["d/", "link => f", "dlink => d"])
    ws.write_raw("f", b"12345")
    ws.chmod_raw("f", 0o640)
    before = time.time()
    st = await ws.ops.stat(ws.path("f"))
    assert (st.kind, st.size, st.mode & 0o777) == (FileKind.FILE, 5, 0o640)
    assert st.is_file and not st.is_directory
    assert abs(st.mtime - before) < 60
    assert await ws.ops.stat(ws.path("link")) == st
    assert (await ws.ops.stat(ws.path("d"))).is_directory
    assert (await ws.ops.stat(ws.path("dlink"))).is_directory
    with pytest.raises(NotFound):
        await ws.ops.stat(ws.path("missing"))


async def test_lstat_does_not_follow_final_link(ws: Workspace) -> None:
    ws.make(["f", "link => f", "dangling => nowhere", "d/", "dlink => d"])
    st = await ws.ops.lstat(ws.path("link"))
    assert st.kind is FileKind.SYMLINK and st.is_symlink
    assert st.size == len("f")
    assert (await ws.ops.lstat(ws.path("dangling"))).kind is FileKind.SYMLINK
    assert (await ws.ops.lstat(ws.path("f"))).kind is FileKind.FILE
    assert (await ws.ops.lstat(ws.path("dlink/"))).kind is FileKind.DIRECTORY
    with pytest.raises(NotFound):
        await ws.ops.lstat(ws.path("missing"))


async def test_readdir_and_list_dir(ws: Workspace) -> None:
    ws.make(["d/sub/", "d/f", "d/.hidden", "d/link => f"])
    ws.mkfifo_raw("d/fifo")
    assert sorted(await ws.ops.readdir(ws.path("d"))) == [".hidden", "f", "fifo", "link", "sub"]
    entries = sorted(await ws.ops.list_dir(ws.path("d")), key=lambda e: e.name)
    assert entries == [
        DirEntry(".hidden", FileKind.FILE),
        DirEntry("f", FileKind.FILE),
        DirEntry("fifo", FileKind.OTHER),
        DirEntry("link", FileKind.SYMLINK),
        DirEntry("sub", FileKind.DIRECTORY),
    ]
    assert await ws.ops.readdir(ws.path("d/sub")) == []


async def test_readdir_errors(ws: Workspace) -> None:
    ws.make(["f"])
    for call in (ws.ops.readdir, ws.ops.list_dir):
        with pytest.raises(NotFound):
            await call(ws.path("missing"))
        with pytest.raises(NotADirectory):
            await call(ws.path("f"))


async def test_is_directory(ws: Workspace) -> None:
    ws.make(["f", "d/", "dlink => d"])
    assert await ws.ops.is_directory(ws.path("d"))
    assert await ws.ops.is_directory(ws.path("dlink"))
    assert not await ws.ops.is_directory(ws.path("f"))
    with pytest.raises(NotFound):
        await ws.ops.is_directory(ws.path("missing"))


async def test_remove(ws: Workspace) -> None:
    ws.make(["f", "empty/", "full/a/b", "link => f", "dlink => full"])
    await ws.ops.remove(ws.path("f"))
    assert not ws.exists_raw("f")
    await ws.ops.remove(ws.path("empty"))
    assert not ws.exists_raw("empty")
    await ws.ops.remove(ws.path("dlink"))
    assert not ws.exists_raw("dlink") and ws.is_dir_raw("full")
    await ws.ops.remove(ws.path("link"))
    assert not ws.exists_raw("link")
    with pytest.raises(DirectoryNotEmpty):
        await ws.ops.remove(ws.path("full"))
    assert ws.read_raw("full/a/b") == b"b"
    await ws.ops.remove(ws.path("full"), recursive=True)
    assert not ws.exists_raw("full")


async def test_remove_link_keeps_target(ws: Workspace) -> None:
    ws.make(["target", "link => target", "d/x", "dlink => d"])
    await ws.ops.remove(ws.path("link"))
    await ws.ops.remove(ws.path("dlink"), recursive=True)
    assert ws.read_raw("target") == b"target"
    assert ws.read_raw("d/x") == b"x"


async def test_remove_errors(ws: Workspace) -> None:
    ws.make(["f"])
    with pytest.raises(NotFound):
        await ws.ops.remove(ws.path("missing"))
    with pytest.raises(NotFound):
        await ws.ops.remove(ws.path("missing/x"))
    with pytest.raises(NotADirectory):
        await ws.ops.remove(ws.path("f/"))
    with pytest.raises(InvalidArgument):
        await ws.ops.remove(ws.path(""), recursive=True)
    assert ws.read_raw("f") == b"f"
    assert await ws.ops.exists(ws.path(""))


async def test_rename(ws: Workspace) -> None:
    ws.make(["a", "b", "d/x", "e/", "link => a"])
    await ws.ops.rename(ws.path("a"), ws.path("moved"))
    assert ws.read_raw("moved") == b"a" and not ws.exists_raw("a")
    await ws.ops.rename(ws.path("moved"), ws.path("b"))
    assert ws.read_raw("b") == b"a"
    await ws.ops.rename(ws.path("d"), ws.path("e"))
    assert ws.read_raw("e/x") == b"x" and not ws.exists_raw("d")
    await ws.ops.rename(ws.path("link"), ws.path("e/link"))
    assert ws.readlink_raw("e/link") == "a"
    await ws.ops.rename(ws.path("b"), ws.path("b"))
    assert ws.read_raw("b") == b"a"


async def test_rename_replaces_link_at_destination(ws: Workspace) -> None:
    ws.make(["src", "target", "link => target"])
    await ws.ops.rename(ws.path("src"), ws.path("link"))
    assert ws.read_raw("link") == b"src"
    assert ws.read_raw("target") == b"target"


async def test_rename_errors(ws: Workspace) -> None:
    ws.make(["f", "d/x", "full/y", "empty/"])
    with pytest.raises(NotFound):
        await ws.ops.rename(ws.path("missing"), ws.path("x"))
    with pytest.raises(NotFound):
        await ws.ops.rename(ws.path("f"), ws.path("missing/x"))
    with pytest.raises(IsADirectory):
        await ws.ops.rename(ws.path("f"), ws.path("empty"))
    with pytest.raises(NotADirectory):
        await ws.ops.rename(ws.path("d"), ws.path("f"))
    with pytest.raises(DirectoryNotEmpty):
        await ws.ops.rename(ws.path("d"), ws.path("full"))
    with pytest.raises(InvalidArgument):
        await ws.ops.rename(ws.path("d"), ws.path("d/inside"))
    with pytest.raises(InvalidArgument):
        await ws.ops.rename(ws.path(""), ws.path("elsewhere"))
    assert ws.read_raw("f") == b"f" and ws.read_raw("d/x") == b"x" and ws.read_raw("full/y") == b"y"
