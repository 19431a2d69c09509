"""Every operation, recorded on each backend and replayed on the memory backend, gives the same
result (or the same error, type and message): a case per operation.

The backend under test is wrapped in :class:`~operations.RecordingBackend`; the cassette is then
replayed with ``InMemoryOperations.from_cassette`` at the same root, and the same calls run on
the replay.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from operations import Backend, InMemoryOperations, OpsError, RecordingBackend
from tests.conformance._commands import ECHO_HI, EXIT_3, PRINTF_NO_NEWLINE
from tests.conformance._workspace import Workspace

PNG = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + b"\0\0\0\x01" * 4 + b"\0" * 8

Call = Callable[[Backend, str], Awaitable[object]]


@dataclass(frozen=True)
class Case:
    name: str
    call: Call


async def _exec(ops: Backend, command: str, cwd: str) -> object:
    out: list[bytes] = []
    result = await ops.exec(command, cwd, on_data=out.append, timeout=30)
    return result, b"".join(out)


async def _search(ops: Backend, root: str) -> object:
    return [m async for m in ops.search("beta", root)]


async def _write_then_read(ops: Backend, root: str) -> object:
    await ops.write_file(f"{root}/d/new.txt", b"new\n")
    return await ops.read_file(f"{root}/d/new.txt"), await ops.readdir(f"{root}/d")


async def _mkdir(ops: Backend, root: str) -> object:
    await ops.mkdir(f"{root}/x/y/z")
    return await ops.is_directory(f"{root}/x/y/z")


async def _remove(ops: Backend, root: str) -> object:
    await ops.remove(f"{root}/a.txt")
    return await ops.exists(f"{root}/a.txt")


async def _rename(ops: Backend, root: str) -> object:
    await ops.rename(f"{root}/a.txt", f"{root}/d/moved.txt")
    return await ops.read_file(f"{root}/d/moved.txt"), await ops.exists(f"{root}/a.txt")


async def _stat(ops: Backend, root: str) -> object:
    st = await ops.stat(f"{root}/a.txt")
    return st.kind, st.size, st.mode


async def _lstat(ops: Backend, root: str) -> object:
    st = await ops.lstat(f"{root}/d")
    return st.kind, st.mode


async def _list_dir(ops: Backend, root: str) -> object:
    return sorted(await ops.list_dir(f"{root}/d"), key=lambda e: e.name)


async def _readdir(ops: Backend, root: str) -> object:
    return sorted(await ops.readdir(root))


CASES = [
    Case("read_file", lambda ops, root: ops.read_file(f"{root}/a.txt")),
    Case("read_file missing", lambda ops, root: ops.read_file(f"{root}/nope")),
    Case("read_file directory", lambda ops, root: ops.read_file(f"{root}/d")),
    Case("access", lambda ops, root: ops.access(f"{root}/a.txt", writable=True)),
    Case("access missing", lambda ops, root: ops.access(f"{root}/nope")),
    Case("detect_image_mime_type", lambda ops, root: ops.detect_image_mime_type(f"{root}/i.png")),
    Case("write_file", _write_then_read),
    Case("write_file missing parent", lambda ops, root: ops.write_file(f"{root}/no/x", b"x")),
    Case("mkdir", _mkdir),
    Case("exists", lambda ops, root: ops.exists(f"{root}/d/b.txt")),
    Case("exists outside", lambda ops, root: ops.exists(f"{root}/../x")),
    Case("stat", _stat),
    Case("lstat", _lstat),
    Case("is_directory", lambda ops, root: ops.is_directory(f"{root}/d")),
    Case("readdir", _readdir),
    Case("list_dir", _list_dir),
    Case("glob", lambda ops, root: ops.glob("**/*.txt", root)),
    Case("search", _search),
    Case("remove", _remove),
    Case("remove non-empty", lambda ops, root: ops.remove(f"{root}/d")),
    Case("rename", _rename),
    Case("exec", lambda ops, root: _exec(ops, ECHO_HI, root)),
    Case("exec exit code", lambda ops, root: _exec(ops, EXIT_3, root)),
    Case("exec no newline", lambda ops, root: _exec(ops, PRINTF_NO_NEWLINE, root)),
    Case("exec missing cwd", lambda ops, root: _exec(ops, ECHO_HI, f"{root}/nope")),
]


async def _outcome(call: Call, ops: Backend, root: str) -> object:
    try:
        return ("ok", await call(ops, root))
    except OpsError as error:
        return ("error", type(error).__name__, str(error))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_recorded_equals_replayed(ws: Workspace, tmp_path: Path, case: Case) -> None:
    ws.make(["d/", "a.txt"])
    ws.write_raw("d/b.txt", b"alpha\nbeta\n")
    ws.write_raw("i.png", PNG)
    cassette = tmp_path / f"{case.name}.cassette"
    recorder = RecordingBackend(ws.ops, cassette, close_inner=False)
    recorded = await _outcome(case.call, recorder, ws.root)
    await recorder.aclose()
    async with InMemoryOperations.from_cassette(cassette) as replay:
        assert replay.root == ws.root
        replayed = await _outcome(case.call, replay, ws.root)
    assert replayed == recorded
