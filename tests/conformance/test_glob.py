"""glob on every backend: the rules of operations._glob, run where the files are."""

from __future__ import annotations

import pytest

from operations import EscapesRoot, InvalidArgument, NotADirectory, NotFound
from tests.conformance._workspace import Workspace

FIND_IGNORE = ["**/node_modules/**", "**/.git/**"]
"""What the find tool passes as ``ignore``."""

LAYOUT = [
    "a.py",
    "b.txt",
    ".hidden.py",
    ".secret/hidden.txt",
    "src/c.py",
    "src/deep/d.py",
    "src/deep/e.spec.ts",
    "node_modules/m.py",
    ".git/config",
    "build/out.py",
    "linkdir => src",
    "link.py => a.py",
]


async def test_basename_pattern_at_any_depth(ws: Workspace) -> None:
    ws.make(LAYOUT)
    ws.write_raw(".gitignore", b"build/\n")
    found = await ws.ops.glob("*.py", ws.root, ignore=FIND_IGNORE)
    assert found == [".hidden.py", "a.py", "link.py", "src/c.py", "src/deep/d.py"]


async def test_path_patterns_are_anchored_to_cwd(ws: Workspace) -> None:
    ws.make(LAYOUT)
    assert await ws.ops.glob("src/*.py", ws.root) == ["src/c.py"]
    assert await ws.ops.glob("src/**/*.spec.ts", ws.root) == ["src/deep/e.spec.ts"]
    assert await ws.ops.glob("**/*.ts", ws.root) == ["src/deep/e.spec.ts"]
    assert await ws.ops.glob("*.py", ws.path("src")) == ["c.py", "deep/d.py"]


async def test_directories_have_trailing_slash_and_links_are_not_followed(ws: Workspace) -> None:
    ws.make(LAYOUT)
    assert await ws.ops.glob("src/**", ws.root) == [
        "src/",
        "src/c.py",
        "src/deep/",
        "src/deep/d.py",
        "src/deep/e.spec.ts",
    ]
    assert await ws.ops.glob("linkdir*", ws.root) == ["linkdir"]


async def test_hidden_included_gitignore_and_git_skipped(ws: Workspace) -> None:
    ws.make(LAYOUT)
    ws.write_raw(".gitignore", b"build/\n*.txt\n!hidden.txt\n")
    found = await ws.ops.glob("*", ws.root, ignore=FIND_IGNORE)
    assert found == [
        ".gitignore",
        ".hidden.py",
        ".secret/",
        ".secret/hidden.txt",
        "a.py",
        "link.py",
        "linkdir",
        "src/",
        "src/c.py",
        "src/deep/",
        "src/deep/d.py",
        "src/deep/e.spec.ts",
    ]


async def test_nested_gitignore(ws: Workspace) -> None:
    ws.make(["sub/keep.log", "sub/drop.log", "top.log"])
    ws.write_raw(".gitignore", b"*.log\n")
    ws.write_raw("sub/.gitignore", b"!keep.log\n")
    assert await ws.ops.glob("*.log", ws.root) == ["sub/keep.log"]


async def test_braces_classes_and_limit(ws: Workspace) -> None:
    ws.make([f"f{i}.{ext}" for i in range(5) for ext in ("py", "ts", "md")])
    assert await ws.ops.glob("f[0-1].{py,ts}", ws.root) == ["f0.py", "f0.ts", "f1.py", "f1.ts"]
    assert await ws.ops.glob("f?.md", ws.root, limit=2) == ["f0.md", "f1.md"]
    assert await ws.ops.glob("nothing*", ws.root) == []


async def test_glob_errors(ws: Workspace) -> None:
    ws.make(["f"])
    with pytest.raises(InvalidArgument, match="error parsing glob"):
        await ws.ops.glob("[", ws.root)
    with pytest.raises(NotFound):
        await ws.ops.glob("*", ws.path("missing"))
    with pytest.raises(NotADirectory):
        await ws.ops.glob("*", ws.path("f"))
    with pytest.raises(EscapesRoot):
        await ws.ops.glob("*", ws.outside)


async def test_glob_flag_like_pattern_is_a_pattern(ws: Workspace) -> None:
    ws.make(["f"])
    assert await ws.ops.glob("--help", ws.root) == []
