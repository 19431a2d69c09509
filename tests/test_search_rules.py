"""The pure rules of search (operations._search): dialect, lines, binary files, walk, limit."""

from __future__ import annotations

import pytest

from operations import NO_RULES, InvalidArgument, SearchMatch
from operations._search import BINARY_SNIFF_BYTES, LineMatcher, is_binary, search_tree

from .tree import TreeCallbacks


def lines(pattern: str, data: bytes, **kw: bool) -> list[tuple[int, str | None]]:
    return list(LineMatcher(pattern, **kw).iter_matches(data))


def test_regex_and_flags() -> None:
    data = b"Alpha\nbeta\nGAMMA 42\n"
    assert lines(r"\d+", data) == [(3, "GAMMA 42")]
    assert lines("alpha", data) == []
    assert lines("alpha", data, ignore_case=True) == [(1, "Alpha")]
    assert lines("a.b", b"a.b\naxb\n", literal=True) == [(1, "a.b")]
    assert lines("a.b", b"a.b\naxb\n") == [(1, "a.b"), (2, "axb")]


def test_crlf_and_last_line_without_terminator() -> None:
    assert lines("x$", b"ax\r\nbx\r\ncx") == [(1, "ax"), (2, "bx"), (3, "cx")]
    assert lines("", b"") == []
    assert lines("", b"\n") == [(1, "")]


def test_non_utf8_line_matches_with_no_text() -> None:
    assert lines("caf", b"caf\xe9\ncafe\n") == [(1, None), (2, "cafe")]


def test_invalid_regex() -> None:
    with pytest.raises(InvalidArgument, match="regex parse error"):
        LineMatcher("(unclosed")
    assert lines("(unclosed", b"x(unclosed\n", literal=True) == [(1, "x(unclosed")]


def test_binary_detection_window() -> None:
    assert is_binary(b"a\0b")
    assert not is_binary(b"a" * BINARY_SNIFF_BYTES + b"\0")


def test_search_tree_order_filters_and_limit() -> None:
    tree = TreeCallbacks(
        {
            "b.txt": b"hit b\n",
            "a/z.py": b"hit az\nmiss\nhit az3\n",
            "a-c.txt": b"hit ac\n",
            ".hidden": b"hit hidden\n",
            "bin.dat": b"hit\0",
            ".gitignore": b"ignored.txt\n",
            "ignored.txt": b"hit ignored\n",
            "link": "b.txt",
        }
    )
    matcher = LineMatcher("hit")
    found = list(search_tree(matcher, "/w", tree.list_dir, tree.read_file))
    assert found == [
        SearchMatch("/w/.hidden", 1, "hit hidden"),
        SearchMatch("/w/a/z.py", 1, "hit az"),
        SearchMatch("/w/a/z.py", 3, "hit az3"),
        SearchMatch("/w/a-c.txt", 1, "hit ac"),
        SearchMatch("/w/b.txt", 1, "hit b"),
    ]
    only_py = list(search_tree(matcher, "/w", tree.list_dir, tree.read_file, glob="*.py"))
    assert [m.path for m in only_py] == ["/w/a/z.py", "/w/a/z.py"]
    no_py = list(search_tree(matcher, "/w", tree.list_dir, tree.read_file, glob="!*.py"))
    assert "/w/a/z.py" not in [m.path for m in no_py]
    assert len(list(search_tree(matcher, "/w", tree.list_dir, tree.read_file, limit=2))) == 2
    assert list(search_tree(matcher, "/w", tree.list_dir, tree.read_file, limit=0)) == []
    root = list(search_tree(matcher, "/", tree.list_dir, tree.read_file, limit=1))
    assert root == [SearchMatch("/.hidden", 1, "hit hidden")]


def test_search_tree_applies_inherited_rules_below_its_own() -> None:
    tree = TreeCallbacks(
        {"a.log": b"hit\n", "keep.log": b"hit\n", "b.txt": b"hit\n", ".gitignore": b"!keep.log\n"}
    )
    inherited = NO_RULES.with_parent_file("sub", b"*.log\n")
    found = search_tree(
        LineMatcher("hit"), "/w/sub", tree.list_dir, tree.read_file, inherited=inherited
    )
    assert [m.path for m in found] == ["/w/sub/b.txt", "/w/sub/keep.log"]
