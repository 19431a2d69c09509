"""Confinement: Go's ``rootTestCases`` table (anchors.md 7.3) over every path operation, plus the
dedicated ``os.Root`` tests and escapes aimed at the decoy beside the root.

Each case lays out ``ROOT``, then calls one operation on ``open``. *target* is the file the call
must touch (or, for a failing case, must not); *ltarget* the link touched when the final link is
not followed (lstat, remove, rename). Every test also checks that the decoy outside the root is
byte-for-byte unchanged.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

import pytest

from operations import (
    AlreadyExists,
    EscapesRoot,
    FileKind,
    InvalidArgument,
    IsADirectory,
    NotFound,
    OpsError,
    TooManyLinks,
)
from tests.conformance._workspace import Workspace

ESCAPE = EscapesRoot
MISSING = NotFound
LOOP = TooManyLinks


@dataclass(frozen=True)
class Case:
    number: int
    name: str
    layout: tuple[str, ...]
    open: str
    target: str | None = None
    ltarget: str | None = None
    error: type[OpsError] | None = None


CASES = [
    Case(1, "plain path", (), "target", "target"),
    Case(2, "path in directory", ("a/b/c/",), "a/b/c/target", "a/b/c/target"),
    Case(3, "symlink", ("link => target",), "link", "target", "link"),
    Case(4, "symlink dotdot slash", ("link => ../",), "link", None, "link", ESCAPE),
    Case(5, "symlink ending in slash", ("dir/", "link => dir/"), "link/target", "dir/target"),
    Case(
        6,
        "slash after symlink to file",
        ("link => ../ROOT/target",),
        "link/",
        "target",
        None,
        ESCAPE,
    ),
    Case(
        7,
        "slash after symlink to dir",
        ("link => ../ROOT/target", "target/"),
        "link/",
        None,
        None,
        ESCAPE,
    ),
    Case(
        8,
        "symlink dotdot dotdot slash",
        ("dir/link => ../../",),
        "dir/link",
        None,
        "dir/link",
        ESCAPE,
    ),
    Case(
        9,
        "symlink chain",
        ("link => a/b/c/target", "a/b => e", "a/e => ../f", "f => g/h/i", "g/h/i => ..", "g/c/"),
        "link",
        "g/c/target",
        "link",
    ),
    Case(10, "path with dot", ("a/b/",), "./a/./b/./target", "a/b/target"),
    Case(11, "path with dotdot", ("a/b/",), "a/../a/b/../../a/b/../b/target", "a/b/target"),
    Case(12, "path with dotdot slash", (), "../", None, None, ESCAPE),
    Case(13, "path with dotdot dotdot slash", ("a/",), "a/../../", None, None, ESCAPE),
    Case(14, "dotdot no symlink", ("a/",), "a/../target", "target"),
    Case(15, "dotdot after symlink", ("a => b/c", "b/c/"), "a/../target", "b/target"),
    Case(16, "dotdot before symlink", ("a => b/c", "b/c/"), "b/../a/target", "b/c/target"),
    Case(17, "symlink ends in dot", ("a => b/.", "b/"), "a/target", "b/target"),
    Case(18, "directory does not exist", (), "a/file", None, None, MISSING),
    Case(20, "symlink cycle", ("a => a",), "a", None, "a", LOOP),
    Case(21, "path escapes", (), "../ROOT/target", "target", None, ESCAPE),
    Case(22, "long path escapes", ("a/",), "a/../../ROOT/target", "target", None, ESCAPE),
    Case(23, "absolute symlink", ("link => $ABS/target",), "link", "target", "link", ESCAPE),
    Case(24, "relative symlink", ("link => ../ROOT/target",), "link", "target", "link", ESCAPE),
    Case(
        25,
        "symlink chain escapes",
        ("link => a/b/c/target", "a/b => e", "a/e => ../../ROOT", "c/"),
        "link",
        "c/target",
        "link",
        ESCAPE,
    ),
]

CONTENT = b"target contents"


def case_id(case: Case) -> str:
    return f"{case.number:02d}-{case.name.replace(' ', '-')}"


def setup(ws: Workspace, case: Case, *, target_file: bool = False, target_dir: bool = False) -> str:
    ws.make(list(case.layout))
    if case.target is not None and target_file:
        ws.write_raw(case.target, CONTENT)
    if case.target is not None and target_dir:
        ws.make([case.target + "/inside"])
    return ws.outside_digest()


def unchanged_target(ws: Workspace, case: Case) -> None:
    if case.target is not None:
        assert ws.read_raw(case.target) == CONTENT, "the target of a failing call was touched"


cases = pytest.mark.parametrize("case", CASES, ids=case_id)


@cases
async def test_read_file(ws: Workspace, case: Case) -> None:
    digest = setup(ws, case, target_file=True)
    if case.error:
        with pytest.raises(case.error):
            await ws.ops.read_file(ws.path(case.open))
    else:
        assert await ws.ops.read_file(ws.path(case.open)) == CONTENT
    unchanged_target(ws, case)
    assert ws.outside_digest() == digest


@cases
async def test_stat(ws: Workspace, case: Case) -> None:
    digest = setup(ws, case, target_file=True)
    if case.error:
        with pytest.raises(case.error):
            await ws.ops.stat(ws.path(case.open))
    else:
        st = await ws.ops.stat(ws.path(case.open))
        assert (st.kind, st.size) == (FileKind.FILE, len(CONTENT))
    assert ws.outside_digest() == digest


@cases
async def test_lstat(ws: Workspace, case: Case) -> None:
    digest = setup(ws, case, target_file=True)
    if case.ltarget:
        assert (await ws.ops.lstat(ws.path(case.open))).kind is FileKind.SYMLINK
    elif case.error:
        with pytest.raises(case.error):
            await ws.ops.lstat(ws.path(case.open))
    else:
        assert (await ws.ops.lstat(ws.path(case.open))).kind is FileKind.FILE
    assert ws.outside_digest() == digest


@cases
async def test_readdir(ws: Workspace, case: Case) -> None:
    digest = setup(ws, case, target_dir=True)
    if case.error:
        with pytest.raises(case.error):
            await ws.ops.readdir(ws.path(case.open))
    else:
        assert await ws.ops.readdir(ws.path(case.open)) == ["inside"]
    assert ws.outside_digest() == digest


@cases
async def test_write_file(ws: Workspace, case: Case) -> None:
    digest = setup(ws, case)
    links_before = {case.ltarget: ws.readlink_raw(case.ltarget)} if case.ltarget else {}
    if case.error:
        with pytest.raises(case.error):
            await ws.ops.write_file(ws.path(case.open), b"written")
        if case.target is not None:
            assert not ws.exists_raw(case.target)
    else:
        await ws.ops.write_file(ws.path(case.open), b"written")
        assert case.target is not None
        assert ws.read_raw(case.target) == b"written"
    for link, text in links_before.items():
        assert ws.readlink_raw(link) == text, "a write replaced the symlink it went through"
    assert ws.outside_digest() == digest


@cases
async def test_mkdir(ws: Workspace, case: Case) -> None:
    """mkdir is ``mkdir -p``: a missing parent is created (case 18 succeeds); a final symlink
    that does not lead to a directory is AlreadyExists (Go: error when *ltarget* is set)."""
    digest = setup(ws, case)
    expected = case.error if case.error is not MISSING else None
    if expected is None and case.ltarget:
        expected = AlreadyExists
    if expected:
        with pytest.raises(expected):
            await ws.ops.mkdir(ws.path(case.open))
        if case.target is not None:
            assert not ws.exists_raw(case.target)
    else:
        await ws.ops.mkdir(ws.path(case.open))
        assert ws.is_dir_raw(case.target or case.open)
    assert ws.outside_digest() == digest


@cases
async def test_remove(ws: Workspace, case: Case) -> None:
    digest = setup(ws, case, target_file=True)
    if case.ltarget:
        await ws.ops.remove(ws.path(case.open))
        assert not ws.exists_raw(case.ltarget)
        unchanged_target(ws, case)
    elif case.error:
        with pytest.raises(case.error):
            await ws.ops.remove(ws.path(case.open))
        unchanged_target(ws, case)
    else:
        await ws.ops.remove(ws.path(case.open))
        assert case.target is not None and not ws.exists_raw(case.target)
    assert ws.outside_digest() == digest


@cases
async def test_rename_from(ws: Workspace, case: Case) -> None:
    digest = setup(ws, case, target_file=True)
    if case.ltarget:
        text = ws.readlink_raw(case.ltarget)
        await ws.ops.rename(ws.path(case.open), ws.path("moved"))
        assert ws.readlink_raw("moved") == text
        assert not ws.exists_raw(case.ltarget)
        unchanged_target(ws, case)
    elif case.error:
        with pytest.raises(case.error):
            await ws.ops.rename(ws.path(case.open), ws.path("moved"))
        unchanged_target(ws, case)
        assert not ws.exists_raw("moved")
    else:
        await ws.ops.rename(ws.path(case.open), ws.path("moved"))
        assert ws.read_raw("moved") == CONTENT
        assert case.target is not None and not ws.exists_raw(case.target)
    assert ws.outside_digest() == digest


@cases
async def test_rename_to(ws: Workspace, case: Case) -> None:
    digest = setup(ws, case)
    ws.write_raw("source", b"source contents")
    if case.ltarget:
        await ws.ops.rename(ws.path("source"), ws.path(case.open))
        assert ws.read_raw(case.ltarget) == b"source contents", "the link was not replaced"
        if case.target is not None:
            assert not ws.exists_raw(case.target)
    elif case.error:
        with pytest.raises(case.error):
            await ws.ops.rename(ws.path("source"), ws.path(case.open))
        assert ws.read_raw("source") == b"source contents"
    else:
        await ws.ops.rename(ws.path("source"), ws.path(case.open))
        assert case.target is not None and ws.read_raw(case.target) == b"source contents"
        assert not ws.exists_raw("source")
    assert ws.outside_digest() == digest


async def test_empty_path_is_the_root_itself(ws: Workspace) -> None:
    """Case 19: with absolute paths, the empty relative path names the root directory."""
    ws.make(["f"])
    digest = ws.outside_digest()
    root = ws.path("")
    with pytest.raises(IsADirectory):
        await ws.ops.read_file(root)
    with pytest.raises(IsADirectory):
        await ws.ops.write_file(root, b"x")
    await ws.ops.mkdir(root)
    assert (await ws.ops.stat(root)).is_directory
    assert await ws.ops.readdir(root) == ["f"]
    with pytest.raises(InvalidArgument):
        await ws.ops.remove(root, recursive=True)
    with pytest.raises(InvalidArgument):
        await ws.ops.rename(root, ws.path("elsewhere"))
    with pytest.raises(InvalidArgument):
        await ws.ops.rename(ws.path("f"), ws.path("."))
    assert ws.read_raw("f") == b"f"
    assert ws.outside_digest() == digest


async def test_symlink_to_root(ws: Workspace) -> None:
    """TestRootSymlinkToRoot: ``d/d => ..`` leads back to the root, which is allowed."""
    ws.make(["d/d => .."])
    await ws.ops.mkdir(ws.path("d/d/new"))
    assert ws.is_dir_raw("new")
    assert sorted(await ws.ops.readdir(ws.path("d/d"))) == ["d", "new"]


async def test_paths_outside_the_root(ws: Workspace) -> None:
    """TestOpenInRoot and friends: the decoy's own absolute path, and links aimed at it."""
    rel_out = posixpath.relpath(ws.outside, ws.root)
    ws.make(
        [
            f"rel => {rel_out}/secret",
            "abs => $OUT/secret",
            f"outdir => {rel_out}",
            "absdir => $OUT",
            "d/deep => ../../" + rel_out.removeprefix("../") + "/target",
        ]
    )
    digest = ws.outside_digest()
    secret = ws.outside + "/secret"
    for path in [
        secret,
        ws.path("rel"),
        ws.path("abs"),
        ws.path("outdir/secret"),
        ws.path("absdir/secret"),
        ws.path("d/deep"),
    ]:
        with pytest.raises(EscapesRoot):
            await ws.ops.read_file(path)
        with pytest.raises(EscapesRoot):
            await ws.ops.write_file(path, b"pwned")
        with pytest.raises(EscapesRoot):
            await ws.ops.stat(path)
        with pytest.raises(EscapesRoot):  # not "missing": an escape is refused and audited
            await ws.ops.exists(path)
    for path in [ws.path("outdir/new"), ws.path("absdir/new"), ws.outside + "/new"]:
        with pytest.raises(EscapesRoot):
            await ws.ops.write_file(path, b"pwned")
        with pytest.raises(EscapesRoot):
            await ws.ops.mkdir(path)
        with pytest.raises(EscapesRoot):
            await ws.ops.rename(ws.path("rel"), path)
    with pytest.raises(EscapesRoot):
        await ws.ops.remove(ws.path("outdir/secret"))
    with pytest.raises(EscapesRoot):
        await ws.ops.readdir(ws.path("outdir"))
    with pytest.raises(EscapesRoot):
        await ws.ops.remove(secret)
    with pytest.raises(EscapesRoot):
        await ws.ops.rename(secret, ws.path("stolen"))
    assert not ws.exists_raw("stolen")
    # The links themselves are inside the root: they can be inspected and removed.
    assert (await ws.ops.lstat(ws.path("abs"))).is_symlink
    await ws.ops.remove(ws.path("outdir"))
    assert ws.outside_digest() == digest


async def test_search_and_glob_do_not_follow_links_out(ws: Workspace) -> None:
    rel_out = posixpath.relpath(ws.outside, ws.root)
    ws.make([f"outdir => {rel_out}", f"secret => {rel_out}/secret"])
    assert [m async for m in ws.ops.search("outside", ws.root)] == []
    assert await ws.ops.glob("*", ws.root) == ["outdir", "secret"]


@pytest.mark.parametrize("tool", ["ls", "find", "grep"])
async def test_a_tool_answers_an_escape_like_read(ws: Workspace, tool: str) -> None:
    """``ls``/``find``/``grep`` of ``../..`` or of the decoy used to say ``Path not found``
    (``exists`` answered False), so the probe was neither refused as an escape nor audited."""
    from agent_side.tools import create_all_tools
    from agent_side.tools._errors import ToolError

    tools = {t.name: t for t in create_all_tools(ws.ops.root, ws.ops)}
    for path in ["../..", ws.outside]:
        args = {"path": path} if tool == "ls" else {"path": path, "pattern": "*"}
        with pytest.raises(ToolError) as caught:
            await tools[tool].execute(
                "call", tools[tool].parameters.model_validate(args), None, None
            )
        assert str(caught.value).startswith("ESCAPES_ROOT: path escapes the workspace root, "), (
            path,
            str(caught.value),
        )
