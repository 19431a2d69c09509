"""The glob dialect (operations._glob) and the glob walk (operations._walk.glob_paths)."""

from __future__ import annotations

import pytest

from operations import FileKind, InvalidArgument
from operations._glob import compile_glob
from operations._walk import glob_paths

from .tree import TreeCallbacks


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("*.py", "a/b/c.py", True),
        ("*.py", "c.py", True),
        ("*.py", "a/.hidden.py", True),
        ("*.py", "a/b/c.pyc", False),
        ("src/*.py", "src/a.py", True),
        ("src/*.py", "x/src/a.py", False),
        ("src/*.py", "src/a/b.py", False),
        ("/top.txt", "top.txt", True),
        ("/top.txt", "d/top.txt", False),
        ("**/test/*.py", "test/x.py", True),
        ("**/test/*.py", "a/b/test/x.py", True),
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b", True),
        ("a/**", "a", True),
        ("a/**", "a/x/y", True),
        ("a/**", "ab", False),
        ("**", "a/b/c", True),
        ("**/node_modules/**", "node_modules", True),
        ("**/node_modules/**", "x/node_modules/y/z.js", True),
        ("{a,b}.txt", "b.txt", True),
        ("{a,b}.txt", "c.txt", False),
        ("*.{py,t{s,sx}}", "d/y.tsx", True),
        ("?.md", "a.md", True),
        ("?.md", "ab.md", False),
        ("a?b", "a/b", False),
        ("a*b", "a/b", False),
        ("[abc]x", "bx", True),
        ("[!a]x", "bx", True),
        ("[!a]x", "ax", False),
        ("[^a]x", "ax", False),
        ("[a-c]z", "bz", True),
        ("[a-c]z", "dz", False),
        ("[]]", "]", True),
        ("\\*", "*", True),
        ("\\*", "a", False),
        ("a.b", "axb", False),
    ],
)
def test_match(pattern: str, path: str, expected: bool) -> None:
    assert compile_glob(pattern).match(path) is expected


@pytest.mark.parametrize("pattern", ["[", "a[b", "{a,b", "a}", "[z-a]", "", "a\\"])
def test_invalid_pattern(pattern: str) -> None:
    with pytest.raises(InvalidArgument, match="error parsing glob"):
        compile_glob(pattern)


def test_directory_match_ignores_trailing_slash() -> None:
    assert compile_glob("src").match("src/")


TREE = {
    "a.py": b"",
    "b.txt": b"",
    ".hidden.py": b"",
    "src/": None,
    "src/c.py": b"",
    "src/deep/": None,
    "src/deep/d.py": b"",
    "node_modules/": None,
    "node_modules/m.py": b"",
    ".git/": None,
    ".git/config.py": b"",
    "build/": None,
    "build/out.py": b"",
    ".gitignore": b"build/\n",
    "link.py": "a.py",
}


def test_glob_paths_rules() -> None:
    tree = TreeCallbacks(TREE)
    found = glob_paths(tree.list_dir, tree.read_file, "*.py", ignore=["**/node_modules/**"])
    assert found == [".hidden.py", "a.py", "link.py", "src/c.py", "src/deep/d.py"]


def test_glob_paths_reports_directories_with_slash() -> None:
    tree = TreeCallbacks(TREE)
    assert glob_paths(tree.list_dir, tree.read_file, "src*") == ["src/"]
    assert glob_paths(tree.list_dir, tree.read_file, "src/**") == [
        "src/",
        "src/c.py",
        "src/deep/",
        "src/deep/d.py",
    ]


def test_glob_paths_limit_is_applied_after_sorting() -> None:
    tree = TreeCallbacks({f"f{i:02d}": b"" for i in range(30)} | {"a/": None, "a/f00": b""})
    assert glob_paths(tree.list_dir, tree.read_file, "f*", limit=3) == ["a/f00", "f00", "f01"]
    assert glob_paths(tree.list_dir, tree.read_file, "f*", limit=0) == []


def test_glob_paths_bad_ignore_pattern() -> None:
    tree = TreeCallbacks(TREE)
    with pytest.raises(InvalidArgument, match="error parsing glob"):
        glob_paths(tree.list_dir, tree.read_file, "*", ignore=["[x"])


def test_tree_helper_kinds() -> None:
    tree = TreeCallbacks(TREE)
    assert ("link.py", FileKind.SYMLINK) in list(tree.list_dir(""))
