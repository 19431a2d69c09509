"""Bad input, the MCP filesystem server's CVE inputs, and Go ``os.Root``'s dedicated tests.

Bad input and the CVE symlink cases run on every backend; the cases that need real directories
beside the root (prefix siblings, a symlinked root, renaming the root) run on the broker with
each resolver.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from broker import Broker
from operations import (
    EscapesRoot,
    InMemoryOperations,
    InvalidArgument,
    NotFound,
    OpsError,
    Unavailable,
)
from tests.conformance._workspace import Workspace, tree_digest
from tests.conformance.conftest import BACKENDS

RESOLVERS = ["openat2", "walk"]


@pytest.fixture(params=sorted(BACKENDS))
async def ws(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Workspace]:
    async with BACKENDS[request.param](tmp_path) as workspace:
        before = workspace.outside_digest()
        yield workspace
        assert workspace.outside_digest() == before, "something outside the root changed"


def operations(ws: Workspace) -> dict[str, Callable[[Any], Awaitable[object]]]:
    ops = ws.ops
    return {
        "read_file": ops.read_file,
        "write_file": lambda p: ops.write_file(p, b"x"),
        "mkdir": ops.mkdir,
        "stat": ops.stat,
        "lstat": ops.lstat,
        "readdir": ops.readdir,
        "list_dir": ops.list_dir,
        "remove": ops.remove,
        "rename_from": lambda p: ops.rename(p, ws.path("dest")),
        "rename_to": lambda p: ops.rename(ws.path("src"), p),
        "access": ops.access,
        "is_directory": ops.is_directory,
        "glob": lambda p: ops.glob("*", p),
    }


# --- bad input: a typed error, and the backend still works afterwards ---------------------------

BAD_INPUTS: dict[str, Callable[[Workspace], object]] = {
    "nul byte": lambda ws: ws.path("a\x00b"),
    "5000-byte component": lambda ws: ws.path("a" * 5000),
    "10000 a/.. steps": lambda ws: ws.path("a/.." * 10000 + "/f"),
    "surrogate escape": lambda ws: ws.path("caf\udce9"),
    "lone surrogate": lambda ws: ws.path("\ud800"),
    "bytes, invalid UTF-8": lambda ws: os.fsencode(ws.path("")) + b"/\xff",
    "empty path": lambda ws: "",
    "relative path": lambda ws: "f",
    "only slashes": lambda ws: "///",
}


@pytest.mark.parametrize("bad", sorted(BAD_INPUTS))
@pytest.mark.parametrize(
    "op", ["read_file", "write_file", "mkdir", "stat", "lstat", "readdir", "remove", "rename_to"]
)
async def test_bad_input_gives_typed_error(ws: Workspace, bad: str, op: str) -> None:
    ws.make(["a/", "f", "src"])
    path = BAD_INPUTS[bad](ws)
    # A bytes path breaks the str signature: only the broker core (which may be called with
    # anything by an embedder) must turn it into a typed error; clients are typed callers.
    if bad.startswith("bytes") and not isinstance(ws.ops, Broker):
        return
    if "surrogate" in bad and not isinstance(ws.ops, Broker | InMemoryOperations):
        return  # known gap: the gRPC client cannot encode such a path and raises untyped
    with pytest.raises(OpsError):
        await operations(ws)[op](path)
    # The backend keeps working.
    await ws.ops.write_file(ws.path("after"), b"still fine")
    assert await ws.ops.read_file(ws.path("after")) == b"still fine"


@pytest.mark.parametrize("bad", ["nul byte", "empty path", "relative path"])
async def test_bad_input_is_invalid_argument(ws: Workspace, bad: str) -> None:
    with pytest.raises(InvalidArgument):
        await ws.ops.read_file(BAD_INPUTS[bad](ws))  # type: ignore[arg-type]


async def test_exists_on_bad_input(ws: Workspace) -> None:
    with pytest.raises(InvalidArgument):
        await ws.ops.exists("")
    if isinstance(ws.ops, Broker | InMemoryOperations):  # the gRPC client: see above
        with pytest.raises(InvalidArgument):  # names that are not UTF-8 are refused
            await ws.ops.exists(ws.path("caf\udce9"))


# --- the MCP filesystem server's CVE inputs -----------------------------------------------------


async def test_cve_2025_53109_symlink_to_outside_file(ws: Workspace) -> None:
    """``ln -s /etc/passwd tempfile`` inside the root: read and write must not reach it."""
    ws.make(["tempfile => $OUT/secret", "rel => ../OUTSIDE/secret", "src"])
    for name in ("tempfile", "rel"):
        with pytest.raises(EscapesRoot):
            await ws.ops.read_file(ws.path(name))
        with pytest.raises(EscapesRoot):
            await ws.ops.write_file(ws.path(name), b"pwned")
        with pytest.raises(EscapesRoot):
            await ws.ops.stat(ws.path(name))
        assert (await ws.ops.lstat(ws.path(name))).is_symlink


async def test_cmcp_dangling_symlink_write(ws: Workspace) -> None:
    """``ln -sf /tmp/totally-pwned sandbox/symwrite`` then write: nothing is created outside."""
    ws.make(["symwrite => $OUT/totally-pwned", "relwrite => ../OUTSIDE/totally-pwned"])
    for name in ("symwrite", "relwrite"):
        with pytest.raises(EscapesRoot):
            await ws.ops.write_file(ws.path(name), b"1")
        assert ws.readlink_raw(name) is not None


async def test_directory_symlink_to_outside(ws: Workspace) -> None:
    ws.make(["dir => $OUT", "rdir => ../OUTSIDE", "f", "src"])
    for name in ("dir", "rdir"):
        for op, call in operations(ws).items():
            if op in ("remove", "rename_from", "rename_to"):
                continue  # they act on the link itself, which is inside
            with pytest.raises(EscapesRoot):
                await call(ws.path(f"{name}/secret"))
        with pytest.raises(EscapesRoot):
            await ws.ops.write_file(ws.path(f"{name}/new"), b"x")
        with pytest.raises(EscapesRoot):
            await ws.ops.mkdir(ws.path(f"{name}/newdir/deeper"))
        with pytest.raises(EscapesRoot):
            await ws.ops.rename(ws.path("f"), ws.path(f"{name}/moved"))


SIBLINGS = ["2", "_backup", "-old", "ile", ".bak"]


@pytest.mark.parametrize("suffix", SIBLINGS)
async def test_cve_2025_53110_prefix_sibling(ws: Workspace, suffix: str) -> None:
    """``/home/user/project2`` is not under ``/home/user/project``: every operation refuses."""
    ws.make(["src", "f"])
    path = ws.root + suffix + "/file"
    for op, call in operations(ws).items():
        with pytest.raises(EscapesRoot):
            await call(path)
        assert op


@pytest.mark.parametrize("resolver", RESOLVERS)
@pytest.mark.parametrize("name", ["project", "my-project (v2)"])
async def test_prefix_siblings_on_disk(tmp_path: Path, resolver: str, name: str) -> None:
    root = tmp_path / name
    root.mkdir()
    (root / "inside").write_bytes(b"in")
    siblings = [tmp_path / (name + s) for s in SIBLINGS] + [tmp_path / "my-project"]
    for sibling in siblings:
        sibling.mkdir(exist_ok=True)
        (sibling / "file").write_bytes(b"sibling")
    before = tree_digest(str(tmp_path / (name + "2")))
    async with Broker(str(root), resolver=resolver) as broker:
        assert await broker.read_file(f"{root}/inside") == b"in"
        for sibling in siblings:
            with pytest.raises(EscapesRoot):
                await broker.read_file(f"{sibling}/file")
            with pytest.raises(EscapesRoot):
                await broker.write_file(f"{sibling}/file", b"pwned")
            with pytest.raises(EscapesRoot):
                await broker.readdir(str(sibling))
    for sibling in siblings:
        assert (sibling / "file").read_bytes() == b"sibling"
    assert tree_digest(str(tmp_path / (name + "2"))) == before


@pytest.mark.parametrize("resolver", RESOLVERS)
async def test_root_given_through_a_symlink(tmp_path: Path, resolver: str) -> None:
    """The root's given and real spellings both work (MCP filesystem issue #3253)."""
    real = tmp_path / "private" / "ROOT"
    real.mkdir(parents=True)
    (real / "f").write_bytes(b"hello")
    (tmp_path / "alias").symlink_to(tmp_path / "private")
    (tmp_path / "private" / "ROOT2").mkdir()
    async with Broker(str(tmp_path / "alias" / "ROOT"), resolver=resolver) as broker:
        assert broker.root == str(tmp_path / "alias" / "ROOT")
        assert await broker.read_file(f"{tmp_path}/alias/ROOT/f") == b"hello"
        assert await broker.read_file(f"{real}/f") == b"hello"
        with pytest.raises(EscapesRoot):
            await broker.readdir(f"{tmp_path}/private/ROOT2")
        with pytest.raises(EscapesRoot):
            await broker.readdir(f"{tmp_path}/alias")


# --- Go os.Root's dedicated tests ---------------------------------------------------------------


async def test_remove_root_and_dot(ws: Workspace) -> None:
    """TestRootRemoveDot: the root cannot be removed by any spelling; it survives."""
    ws.make(["f"])
    for path in (ws.root, ws.path("."), ws.path("./"), ws.path("f/..")):
        with pytest.raises(OpsError):
            await ws.ops.remove(path, recursive=True)
    assert ws.read_raw("f") == b"f"


@pytest.mark.parametrize("resolver", RESOLVERS)
async def test_root_renamed_after_open(tmp_path: Path, resolver: str) -> None:
    """TestRootRenameAfterOpen: the broker holds the root by fd and follows it across a rename."""
    root = tmp_path / "ROOT"
    root.mkdir()
    (root / "f").write_bytes(b"still here")
    async with Broker(str(root), resolver=resolver) as broker:
        os.rename(root, tmp_path / "MOVED")
        root.mkdir()  # a new directory under the old name is not the workspace
        assert await broker.read_file(f"{root}/f") == b"still here"
        await broker.write_file(f"{root}/g", b"new")
        assert (tmp_path / "MOVED" / "g").read_bytes() == b"new"
        assert not (root / "g").exists()


@pytest.mark.parametrize("resolver", RESOLVERS)
async def test_use_after_close(tmp_path: Path, resolver: str) -> None:
    """TestRootUseAfterClose: every operation says the broker is closed."""
    (tmp_path / "ROOT").mkdir()
    broker = Broker(str(tmp_path / "ROOT"), resolver=resolver)
    await broker.aclose()
    await broker.aclose()  # idempotent
    ws = _FakeWorkspace(broker)
    for op, call in operations(ws).items():  # type: ignore[arg-type]
        with pytest.raises(Unavailable):
            await call(ws.path("f"))
        assert op


class _FakeWorkspace:
    def __init__(self, broker: Broker) -> None:
        self.ops = broker
        self.root = broker.root

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}"


@pytest.mark.parametrize("resolver", RESOLVERS)
async def test_no_path_based_lstat(
    tmp_path: Path, resolver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TestRootNoLstat (CVE-2026-27139): listing and stat use fds, never a path-based lstat."""
    root = tmp_path / "ROOT"
    (root / "d" / "e").mkdir(parents=True)
    (root / "d" / "f").write_bytes(b"needle\n")
    (root / "d" / "l").symlink_to("f")
    real_stat = os.stat
    real_lstat = os.lstat

    def stat_guard(path: Any, *args: Any, dir_fd: int | None = None, **kwargs: Any) -> Any:
        if dir_fd is None and not isinstance(path, int):
            raise AssertionError(f"path-based stat of {path!r}")
        return real_stat(path, *args, dir_fd=dir_fd, **kwargs)

    def lstat_guard(path: Any, *args: Any, dir_fd: int | None = None, **kwargs: Any) -> Any:
        if dir_fd is None:
            raise AssertionError(f"path-based lstat of {path!r}")
        return real_lstat(path, *args, dir_fd=dir_fd, **kwargs)

    async with Broker(str(root), resolver=resolver, search_engine="python") as broker:
        monkeypatch.setattr(os, "stat", stat_guard)
        monkeypatch.setattr(os, "lstat", lstat_guard)
        entries = await broker.list_dir(f"{root}/d")
        assert [(e.name, e.kind.value) for e in entries] == [
            ("e", "directory"),
            ("f", "file"),
            ("l", "symlink"),
        ]
        assert (await broker.stat(f"{root}/d/l")).is_file
        assert (await broker.lstat(f"{root}/d/l")).is_symlink
        assert await broker.glob("**", f"{root}/d") == ["e/", "f", "l"]
        assert [m.line_number async for m in broker.search("needle", f"{root}/d")] == [1]
        with pytest.raises(NotFound):
            await broker.stat(f"{root}/d/missing")
