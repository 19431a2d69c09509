"""search on every backend: the rules of operations._search, run where the files are."""

from __future__ import annotations

from contextlib import aclosing

import pytest

from operations import EscapesRoot, InvalidArgument, NotFound, SearchMatch
from tests.conformance._workspace import Workspace


async def collect(
    ws: Workspace, pattern: str, rel: str = "", **options: object
) -> list[SearchMatch]:
    return [m async for m in ws.ops.search(pattern, ws.path(rel), **options)]  # type: ignore[arg-type]


def where(ws: Workspace, matches: list[SearchMatch]) -> list[tuple[str, int, str | None]]:
    prefix = ws.root.rstrip("/") + "/"
    return [(m.path.removeprefix(prefix), m.line_number, m.line_text) for m in matches]


async def test_matches_in_sorted_path_order(ws: Workspace) -> None:
    ws.write_raw("b.txt", b"hit b\n")
    ws.write_raw("a/z.py", b"hit az\nmiss\nhit az3")
    ws.write_raw("a-c.txt", b"hit ac\n")
    ws.write_raw(".hidden", b"hit hidden\n")
    found = where(ws, await collect(ws, "hit"))
    assert found == [
        (".hidden", 1, "hit hidden"),
        ("a/z.py", 1, "hit az"),
        ("a/z.py", 3, "hit az3"),
        ("a-c.txt", 1, "hit ac"),
        ("b.txt", 1, "hit b"),
    ]


async def test_paths_are_absolute_in_backend_namespace(ws: Workspace) -> None:
    ws.write_raw("sub/f.txt", b"needle\n")
    [match] = await collect(ws, "needle", "sub")
    assert match.path == ws.path("sub/f.txt")
    [match] = await collect(ws, "needle", "sub/f.txt")
    assert match == SearchMatch(ws.path("sub/f.txt"), 1, "needle")


async def test_regex_ignore_case_literal(ws: Workspace) -> None:
    ws.write_raw("f.txt", b"Alpha 1\nbeta 22\na.b\naxb\n")
    assert where(ws, await collect(ws, r"\d{2}")) == [("f.txt", 2, "beta 22")]
    assert await collect(ws, "alpha") == []
    assert where(ws, await collect(ws, "alpha", ignore_case=True)) == [("f.txt", 1, "Alpha 1")]
    assert where(ws, await collect(ws, "a.b", literal=True)) == [("f.txt", 3, "a.b")]
    assert len(await collect(ws, "a.b")) == 2


async def test_flag_like_pattern_is_text(ws: Workspace) -> None:
    ws.write_raw("f.txt", b"run --pre=script here\n")
    assert where(ws, await collect(ws, "--pre=script")) == [("f.txt", 1, "run --pre=script here")]


async def test_crlf_binary_and_non_utf8(ws: Workspace) -> None:
    ws.write_raw("crlf.txt", b"one x\r\ntwo x\r\n")
    ws.write_raw("binary.dat", b"x\0x\n")
    ws.write_raw("latin1.txt", b"caf\xe9 x\n")
    found = where(ws, await collect(ws, "x$"))
    assert found == [("crlf.txt", 1, "one x"), ("crlf.txt", 2, "two x"), ("latin1.txt", 1, None)]


async def test_gitignore_respected_and_git_skipped(ws: Workspace) -> None:
    ws.write_raw(".gitignore", b"ignored/\n*.log\n")
    ws.write_raw("ignored/f.txt", b"needle\n")
    ws.write_raw("x.log", b"needle\n")
    ws.write_raw(".git/config", b"needle\n")
    ws.write_raw("kept.txt", b"needle\n")
    assert where(ws, await collect(ws, "needle")) == [("kept.txt", 1, "needle")]


async def test_glob_filter(ws: Workspace) -> None:
    ws.write_raw("a.py", b"needle\n")
    ws.write_raw("src/b.py", b"needle\n")
    ws.write_raw("src/c.ts", b"needle\n")
    assert [p for p, _, _ in where(ws, await collect(ws, "needle", glob="*.py"))] == [
        "a.py",
        "src/b.py",
    ]
    assert [p for p, _, _ in where(ws, await collect(ws, "needle", glob="src/*.ts"))] == [
        "src/c.ts"
    ]


async def test_limit(ws: Workspace) -> None:
    ws.write_raw("many.txt", b"".join(b"hit %d\n" % i for i in range(50)))
    assert len(await collect(ws, "hit", limit=7)) == 7
    assert len(await collect(ws, "hit")) == 50


async def test_closing_early(ws: Workspace) -> None:
    for i in range(20):
        ws.write_raw(f"f{i:02d}.txt", b"hit\n" * 10)
    async with aclosing(ws.ops.search("hit", ws.root, limit=1000)) as matches:
        first = await anext(matches)
    assert first.path == ws.path("f00.txt")


async def test_search_errors(ws: Workspace) -> None:
    ws.write_raw("f.txt", b"x\n")
    with pytest.raises(InvalidArgument):
        await collect(ws, "(unclosed")
    with pytest.raises(NotFound):
        await collect(ws, "x", "missing")
    with pytest.raises(EscapesRoot):
        [m async for m in ws.ops.search("x", ws.outside)]
