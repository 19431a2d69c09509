"""Go ``os.Root``'s ``rootConsistencyTestCases``: for paths that do not escape, every backend
succeeds or fails exactly as plain ``os`` does on a copy of the tree (same error type, same result).

The ``rootTestCases`` table itself runs in the conformance suite (``tests/conformance/
test_confinement.py``); this file adds the consistency table, on every registered backend, and
checks that the decoy beside the root is byte-identical afterwards.
"""

from __future__ import annotations

import errno
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from operations import FileKind, InvalidArgument, NotADirectory, OpsError
from tests.conformance._workspace import DiskWorkspace, Workspace
from tests.conformance.conftest import BACKENDS


@pytest.fixture(params=sorted(BACKENDS))
async def ws(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Workspace]:
    """Every registered conformance backend, as in the suite."""
    async with BACKENDS[request.param](tmp_path) as workspace:
        yield workspace


@pytest.fixture
def guard(ws: Workspace):  # type: ignore[no-untyped-def]
    """Yields the workspace and checks afterwards that the outside decoy is unchanged."""
    before = ws.outside_digest()
    yield ws
    assert ws.outside_digest() == before, "something outside the root changed"


# --- rootConsistencyTestCases: the backend and plain `os` on a copy agree ------------------------

CONSISTENCY = [
    ("file", ["target"], "target"),
    ("dir slash dot", ["target/file"], "target/."),
    ("dot", ["file"], "."),
    ("file slash dot", ["target"], "target/."),
    ("dir slash", ["target/file"], "target/"),
    ("dot slash", ["file"], "./"),
    ("file slash", ["target"], "target/"),
    ("file in path", ["file"], "file/target"),
    ("directory in path missing", [], "dir/target"),
    ("target does not exist", [], "target"),
    ("symlink slash", ["target/file", "link => target"], "link/"),
    ("symlink slash dot", ["target/file", "link => target"], "link/."),
    ("unresolved symlink", ["link => target"], "link"),
    ("resolved symlink", ["link => target", "target"], "link"),
    ("dotdot in path after symlink", ["a => b/c", "b/c/", "b/target"], "a/../target"),
    ("symlink to dir ends in slash", ["dir/", "link => dir/"], "link"),
    ("symlink to file ends in slash", ["file", "link => file/"], "link"),
    ("long file name", [], "a" * 500),
    ("question mark", [], "?"),
    ("nul byte", [], "\x00"),
]
# Not ported: "unreadable directory" (the suite runs as root, which reads anything) and the two
# unix-socket cases (the layout notation has no sockets).


def _os_outcome(op: str, full: str) -> object:
    """What plain ``os`` does for ``op`` on ``full``: a result, or the Operations error type."""
    from broker._dirfd import errno_error

    try:
        if op == "read":
            with open(full, "rb") as f:
                return f.read()
        if op == "stat":
            return FileKind.DIRECTORY if os.path.isdir(full) else os.stat(full).st_size
        if op == "lstat":
            return os.lstat(full).st_mode & 0o170000
        if op == "readdir":
            return sorted(os.listdir(full))
        if op == "write":
            with open(full, "wb") as f:
                f.write(b"new")
            return None
        raise AssertionError(op)
    except ValueError:
        return InvalidArgument
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            exc.errno = errno.ENOENT
        return type(errno_error(op, full, exc))


async def _backend_outcome(ws: Workspace, op: str, full: str) -> object:
    try:
        if op == "read":
            return await ws.ops.read_file(full)
        if op == "stat":
            info = await ws.ops.stat(full)
            return FileKind.DIRECTORY if info.is_directory else info.size
        if op == "lstat":
            kind = (await ws.ops.lstat(full)).kind
            return {FileKind.FILE: 0o100000, FileKind.DIRECTORY: 0o040000}.get(kind, 0o120000)
        if op == "readdir":
            return sorted(await ws.ops.readdir(full))
        if op == "write":
            await ws.ops.write_file(full, b"new")
            return None
        raise AssertionError(op)
    except OpsError as exc:
        return type(exc)


@pytest.mark.parametrize("op", ["read", "stat", "lstat", "readdir", "write"])
@pytest.mark.parametrize(("name", "fs", "open_"), CONSISTENCY, ids=[c[0] for c in CONSISTENCY])
async def test_consistency(
    guard: Workspace, tmp_path: Path, op: str, name: str, fs: list[str], open_: str
) -> None:
    plain = DiskWorkspace(guard.ops, str(tmp_path / "PLAIN"), str(tmp_path / "OUTSIDE"))
    os.mkdir(plain.root)
    plain.make(fs)
    guard.make(fs)
    want = _os_outcome(op, plain.path(open_))
    got = await _backend_outcome(guard, op, guard.path(open_))
    if name == "symlink to file ends in slash" and op == "lstat":
        want = 0o120000  # lstat does not follow the final link, so its slash-ended text is moot
    if op == "write" and name in ("file slash", "symlink to file ends in slash"):
        # Linux says EISDIR for open("file/", O_CREAT); the backends say what is wrong instead.
        want = NotADirectory
    assert got == want, f"{op} {open_!r}: backend gives {got!r}, plain os gives {want!r}"
