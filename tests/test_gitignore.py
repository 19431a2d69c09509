"""ripgrep-style .gitignore rules (operations._gitignore), and the walk that applies them."""

from __future__ import annotations

from operations._gitignore import NO_RULES
from operations._walk import walk

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
