"""ripgrep-style .gitignore rules (operations._gitignore), and the walk that applies them."""

from __future__ import annotations

import pytest

from operations import FileKind, PermissionDenied
from operations._gitignore import NO_RULES, parent_ignore_rules
from operations._walk import WalkReach, walk

from .tree import TreeCallbacks


def test_basename_pattern_matches_at_any_depth() -> None:
    r = NO_RULES.with_file("", b"*.log\n")
    assert r.is_ignored("a.log", False)
    assert r.is_ignored("x/y/a.log", False)
    assert not r.is_ignored("a.txt", False)


def test_comments_blank_lines_and_escapes() -> None:
    r = NO_RULES.with_file("", b"# comment\n\n\\#hash\n\\!bang\ntrail   \n")
    assert not r.is_ignored("# comment", False)
    assert r.is_ignored("#hash", False)
    assert r.is_ignored("!bang", False)
    assert r.is_ignored("trail", False)


def test_negation_last_rule_wins() -> None:
    r = NO_RULES.with_file("", b"*.log\n!keep.log\n")
    assert r.is_ignored("a.log", False)
    assert not r.is_ignored("keep.log", False)
    r2 = NO_RULES.with_file("", b"!keep.log\n*.log\n")
    assert r2.is_ignored("keep.log", False)


def test_anchored_patterns() -> None:
    r = NO_RULES.with_file("", b"/top\nsub/file\n")
    assert r.is_ignored("top", False)
    assert not r.is_ignored("d/top", False)
    assert r.is_ignored("sub/file", False)
    assert not r.is_ignored("x/sub/file", False)


def test_directory_only_patterns() -> None:
    r = NO_RULES.with_file("", b"build/\n")
    assert r.is_ignored("build", True)
    assert r.is_ignored("a/build", True)
    assert not r.is_ignored("build", False)


def test_double_star() -> None:
    r = NO_RULES.with_file("", b"**/gen/**\na/**/z\n")
    assert r.is_ignored("x/gen/y", False)
    assert r.is_ignored("a/z", False)
    assert r.is_ignored("a/b/c/z", False)


def test_nested_file_is_relative_to_its_directory() -> None:
    r = NO_RULES.with_file("", b"*.tmp\n").with_file("sub", b"/local\n!keep.tmp\n")
    assert r.is_ignored("sub/local", False)
    assert not r.is_ignored("local", False)
    assert not r.is_ignored("sub/keep.tmp", False)
    assert r.is_ignored("keep.tmp", False)


def test_walk_applies_nested_files_and_dot_ignore() -> None:
    tree = TreeCallbacks(
        {
            ".gitignore": b"*.log\nout/\n",
            ".ignore": b"!important.log\n",
            "a.log": b"",
            "important.log": b"",
            "out/x": b"",
            "src/.gitignore": b"secret.txt\n!b.log\n",
            "src/secret.txt": b"",
            "src/b.log": b"",
            "src/c.txt": b"",
            ".git/HEAD": b"",
            ".hidden": b"",
        }
    )
    rels = [entry.rel for entry in walk(tree.list_dir, tree.read_file)]
    assert rels == [
        ".gitignore",
        ".hidden",
        ".ignore",
        "important.log",
        "src",
        "src/.gitignore",
        "src/b.log",
        "src/c.txt",
    ]


def test_walk_without_ignore_files_still_skips_git() -> None:
    tree = TreeCallbacks({".gitignore": b"*\n", "a": b"", ".git/HEAD": b""})
    rels = [e.rel for e in walk(tree.list_dir, tree.read_file, respect_ignore_files=False)]
    assert rels == [".gitignore", "a"]


def test_parent_file_keeps_its_anchors() -> None:
    """``w/.gitignore`` seen from a walk of ``w/sub``: anchored rules still name ``w``'s paths."""
    r = NO_RULES.with_parent_file("sub", b"/sub/top\nsub/build/\n*.log\n/elsewhere\n")
    assert r.is_ignored("top", False)
    assert not r.is_ignored("deep/top", False)
    assert r.is_ignored("build", True)
    assert r.is_ignored("deep/x.log", False)
    assert not r.is_ignored("elsewhere", False)
    assert not r.with_file("", b"!keep.log\n").is_ignored("keep.log", False)  # deeper wins


def test_parent_ignore_rules_read_from_the_root_down_never_above() -> None:
    files = {
        ".gitignore": b"*.log\n",
        ".ignore": b"!keep.log\n",
        "a/.gitignore": b"/b/c/top\n",
        "a/b/.gitignore": b"keep.log\n",
        "a/b/c/.gitignore": b"own\n",  # the walk root's own file: the walk reads it, not this
    }
    asked: list[str] = []

    def read(rel: str) -> bytes | None:
        asked.append(rel)
        return files.get(rel)

    r = parent_ignore_rules("a/b/c", read)
    assert asked == [
        ".gitignore",
        ".ignore",
        "a/.gitignore",
        "a/.ignore",
        "a/b/.gitignore",
        "a/b/.ignore",
    ]
    assert r.is_ignored("x.log", False)
    assert r.is_ignored("keep.log", False)  # a/b/.gitignore comes after the root's .ignore
    assert r.is_ignored("top", False)
    assert not r.is_ignored("own", False)
    assert parent_ignore_rules("", read) is NO_RULES
    assert parent_ignore_rules(".", read) is NO_RULES
    with pytest.raises(ValueError, match="resolved path"):
        parent_ignore_rules("a/../b", read)


def test_unreadable_parent_file_is_skipped() -> None:
    def read(rel: str) -> bytes | None:
        if rel == ".gitignore":
            raise PermissionDenied("read", rel)
        return b"*.tmp\n" if rel == ".ignore" else None

    r = parent_ignore_rules("sub", read)
    assert r.is_ignored("a.tmp", False)
    assert len(r) == 1


REACH_TREE = {
    ".gitignore": b"out/\n*.log\n",
    "a.log": b"",
    "keep/.gitignore": b"!b.log\n",
    "keep/b.log": b"",
    "keep/c.log": b"",
    "out/x": b"",
    "out/.gitignore": b"!x\n",  # inside an ignored directory: never read by the walk
    "src/.ignore": b"gen/\n",
    "src/gen/g.py": b"",
    "src/m.py": b"",
    "top": b"",
    "deep/top": b"",
    ".git/HEAD": b"",
}


def test_walk_reach_agrees_with_the_walk() -> None:
    tree = TreeCallbacks(REACH_TREE)  # type: ignore[arg-type]
    inherited = NO_RULES.with_parent_file("w", b"/w/top\n*.py\n!m.py\n")
    walked = {
        e.rel
        for e in walk(tree.list_dir, tree.read_file, inherited=inherited)
        if e.kind is FileKind.FILE
    }
    assert walked == {
        ".gitignore",
        "keep/.gitignore",
        "keep/b.log",
        "src/.ignore",
        "src/m.py",
        "deep/top",
    }
    reach = WalkReach(tree.read_file, inherited)
    files = [rel for rel, value in REACH_TREE.items() if value is not None]
    assert {rel for rel in files if reach.reaches(rel)} == walked
