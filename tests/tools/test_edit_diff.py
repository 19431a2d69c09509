"""The edit algorithm and its diffs (pi-tools 2.4; the fuzzy and CRLF cases of 7.1)."""

from __future__ import annotations

import pytest

from agent_side.tools._edit_diff import (
    Edit,
    EditError,
    apply_edits,
    detect_line_ending,
    generate_diff_string,
    generate_unified_patch,
    normalize_for_fuzzy_match,
    normalize_to_lf,
)
from tests.tools._patch import apply_patch


def _apply(content: str, *pairs: tuple[str, str]) -> str:
    return apply_edits(content, [Edit(o, n) for o, n in pairs], "f.txt")


def test_normalize_for_fuzzy_match() -> None:
    assert normalize_for_fuzzy_match("a\u2014b  \n\u201cq\u201d \uff21") == 'a-b\n"q" A'


def test_line_endings() -> None:
    assert detect_line_ending("a\r\nb\n") == "\r\n"
    assert detect_line_ending("a\nb\r\n") == "\n"
    assert detect_line_ending("abc") == "\n"
    assert normalize_to_lf("a\r\nb\rc") == "a\nb\nc"


def test_edits_match_the_original() -> None:
    assert _apply("foo\nbar\nbaz\n", ("foo\n", "foo bar\n"), ("bar\n", "BAR\n")) == (
        "foo bar\nBAR\nbaz\n"
    )
    assert _apply("alpha\nbeta\ngamma\ndelta\n", ("alpha", "ALPHA"), ("gamma", "GAMMA")) == (
        "ALPHA\nbeta\nGAMMA\ndelta\n"
    )


@pytest.mark.parametrize(
    ("content", "old", "new", "expected"),
    [
        ("line one   \nline two  \nline three\n", "line one\nline two\n", "replaced\n",
         "replaced\nline three\n"),
        ("你好，世界\n你好（世界）\n", "你好,世界\n你好(世界)\n", "new\n", "new\n"),  # noqa: RUF001
        ("ＡＢＣ１２３\ncafe\u0301\n", "ABC123\ncafé\n", "XYZ789\ncoffee\n", "XYZ789\ncoffee\n"),  # noqa: RUF001
        ("say \u2018hi\u2019\n", "say 'hi'", "say 'yo'", "say 'yo'\n"),
        ("say \u201chi\u201d\n", 'say "hi"', "x", "x\n"),
        ("a \u2013 b \u2014 c\n", "a - b - c", "d", "d\n"),
        ("a\u00a0b\n", "a b", "c", "c\n"),
        ("x = \u2018a\u2019   \ny = 1   \n", "x = 'a'", "x = 'b'", "x = 'b'\ny = 1   \n"),
        ("replace me   \nafter   \n", "replace me\n", "after\n", "after\nafter   \n"),
    ],
)  # fmt: skip
def test_fuzzy_matching(content: str, old: str, new: str, expected: str) -> None:
    result = apply_edits(content, [Edit(old, new)], "f.txt")
    assert result == expected
    assert apply_patch(content, generate_unified_patch("f.txt", content, result)) == result


def test_exact_match_preferred_and_rest_preserved() -> None:
    content = "keep   \n\u201cquoted\u201d\ntarget\n"
    assert _apply(content, ("target", "done")) == "keep   \n\u201cquoted\u201d\ndone\n"


def test_fuzzy_multi_edit() -> None:
    content = "console.log(\u2018hello\u2019);\nhello world  \n"
    result = _apply(
        content,
        ("console.log('hello');", "console.log('world');"),
        ("hello world", "hello universe"),
    )
    assert result == "console.log('world');\nhello universe\n"


@pytest.mark.parametrize(
    ("content", "edits", "message"),
    [
        ("abc\n", [("xyz", "q")],
         "Could not find the exact text in f.txt. The old text must match exactly including all "
         "whitespace and newlines."),
        ("abc\n", [("abc", "x"), ("xyz", "q")],
         "Could not find edits[1] in f.txt. The oldText must match exactly including all "
         "whitespace and newlines."),
        ("foo foo foo\n", [("foo", "bar")],
         "Found 3 occurrences of the text in f.txt. The text must be unique. Please provide more "
         "context to make it unique."),
        ("hello world   \nhello world\n", [("hello world\n", "x")], "Found 2 occurrences"),
        ("a\nb\n", [("a", "x"), ("b", "y"), ("a\nb", "z")],
         "edits[0] and edits[2] overlap in f.txt. Merge them "
         "into one edit or target disjoint regions."),
        ("abc\n", [("", "x")], "oldText must not be empty in f.txt."),
        ("abc\n", [("abc", "x"), ("", "y")], "edits[1].oldText must not be empty in f.txt."),
        ("abc\n", [("abc", "abc")],
         "No changes made to f.txt. The replacement produced identical content. This might "
         "indicate an issue with special characters or the text not existing as expected."),
        ("a\nb\n", [("a", "a"), ("b", "b")],
         "No changes made to f.txt. The replacements produced identical content."),
    ],
)  # fmt: skip
def test_errors(content: str, edits: list[tuple[str, str]], message: str) -> None:
    with pytest.raises(EditError) as info:
        apply_edits(content, [Edit(o, n) for o, n in edits], "f.txt")
    assert str(info.value).startswith(message)


def test_adjacent_edits_allowed() -> None:
    assert _apply("abcd", ("ab", "AB"), ("cd", "CD")) == "ABCD"


def test_diff_string_verified_examples() -> None:
    diff, first = generate_diff_string("alpha\nbeta\ngamma\ndelta", "alpha\nBETA\ngamma\ndelta")
    assert diff == " 1 alpha\n-2 beta\n+2 BETA\n 3 gamma\n 4 delta"
    assert first == 2
    old = "".join(f"line {i}\n" for i in range(1, 21))
    new = old.replace("line 10\n", "LINE 10\n")
    diff, first = generate_diff_string(old, new)
    expected = ["    ...", *(f"  {i} line {i}" for i in range(6, 10)), "-10 line 10",
                "+10 LINE 10", *(f" {i} line {i}" for i in range(11, 15)), "    ..."]  # fmt: skip
    assert diff.split("\n") == expected
    assert first == 10


def test_diff_of_large_file_is_compact() -> None:
    old = "".join(f"line {i}\n" for i in range(1, 601))
    new = old.replace("line 100\n", "X\n").replace("line 300\n", "Y\n").replace("line 500\n", "Z\n")
    diff, _ = generate_diff_string(old, new)
    assert "..." in diff
    assert "line 250" not in diff
    assert len(diff.split("\n")) < 50
    patch = generate_unified_patch("big.txt", old, new)
    assert patch.startswith("--- big.txt\n+++ big.txt\n@@ -96,9 +96,9 @@\n")
    assert apply_patch(old, patch) == new


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("a\nb\nc", "a\nB\nc"),
        ("a\nb\nc\n", "a\nb\nc"),
        ("", "new\n"),
        ("only\n", ""),
        ("x\n" * 30, "x\n" * 10 + "y\n" + "x\n" * 19),
        ("a\nb\n", "c\nd\ne\n"),
    ],
)
def test_patch_round_trips(old: str, new: str) -> None:
    assert apply_patch(old, generate_unified_patch("p", old, new)) == new
