"""grep, find and ls on every backend (pi-tools 7.1)."""

from __future__ import annotations

from agent_side.tools import (
    create_find_tool,
    create_grep_tool,
    create_ls_tool,
    relativize_find_result_path,
)
from tests.tools._call import call, fail, text
from tests.tools.conftest import ToolWorkspace


async def test_grep_single_file(tw: ToolWorkspace) -> None:
    tw.write("example.txt", "first line\nmatch line\nlast line\n")
    grep = create_grep_tool(tw.root, operations=tw.ops)
    result = await call(grep, pattern="match", path="example.txt")
    assert text(result) == "example.txt:2: match line"
    assert result.details is None


async def test_grep_context_and_limit(tw: ToolWorkspace) -> None:
    tw.write("context.txt", "before\nmatch one\nafter\nmatch two\nafter two\n")
    grep = create_grep_tool(tw.root, operations=tw.ops)
    result = await call(grep, pattern="match", limit=1, context=1)
    assert text(result) == (
        "context.txt-1- before\ncontext.txt:2: match one\ncontext.txt-3- after\n\n"
        "[1 matches limit reached. Use limit=2 for more, or refine pattern]"
    )
    assert result.details == {"matchLimitReached": 1}


async def test_grep_flag_like_pattern_is_text(tw: ToolWorkspace) -> None:
    tw.write("a.txt", "nothing here\n")
    grep = create_grep_tool(tw.root, operations=tw.ops)
    assert text(await call(grep, pattern="--pre=./evil.sh")) == "No matches found"


async def test_grep_options_and_long_lines(tw: ToolWorkspace) -> None:
    tw.write("src/a.py", "Alpha = 1\n" + "alpha" + "x" * 600 + "\n")
    tw.write("src/b.txt", "alpha in text\n")
    tw.write("c.py", "a.b\naxb\n")
    grep = create_grep_tool(tw.root, operations=tw.ops)
    out = text(await call(grep, pattern="alpha", ignoreCase=True, glob="*.py"))
    assert out.split("\n")[:2] == [
        "src/a.py:1: Alpha = 1",
        "src/a.py:2: alpha" + "x" * 495 + "... [truncated]",
    ]
    assert out.endswith("\n\n[Some lines truncated to 500 chars. Use read tool to see full lines]")
    assert text(await call(grep, pattern="a.b", literal=True, path="c.py")) == "c.py:1: a.b"
    message = await fail(grep, pattern="x", path="missing")
    assert message == f"Path not found: {tw.path('missing')}"


async def test_a_bad_regex_names_the_tool_calls_own_option(tw: ToolWorkspace) -> None:
    tw.write("c.py", "f(x)\n")
    grep = create_grep_tool(tw.root, operations=tw.ops)
    message = await fail(grep, pattern="f(")
    assert message.startswith("rg: regex parse error:\n    (?:f()"), message
    assert "literal=True" not in message
    hinted = await fail(grep, pattern="(?<=a+)b")  # Python's own words: the JSON hint follows
    assert hinted.endswith('set "literal": true to search for the text)'), hinted
    assert text(await call(grep, pattern="f(", literal=True)) == "c.py:1: f(x)"


async def test_find_hidden_and_gitignored(tw: ToolWorkspace) -> None:
    tw.write(".secret/hidden.txt", "h")
    tw.write("visible.txt", "v")
    tw.write(".gitignore", "ignored.txt\n")
    tw.write("ignored.txt", "i")
    find = create_find_tool(tw.root, operations=tw.ops)
    out = text(await call(find, pattern="*.txt"))
    assert out.split("\n") == [".secret/hidden.txt", "visible.txt"]


async def test_find_errors_and_limits(tw: ToolWorkspace) -> None:
    tw.write("a.txt", "a")
    tw.write("b.txt", "b")
    find = create_find_tool(tw.root, operations=tw.ops)
    assert "error parsing glob" in await fail(find, pattern="[")
    assert text(await call(find, pattern="--help")) == "No files found matching pattern"
    result = await call(find, pattern="*.txt", limit=1)
    assert text(result) == (
        "a.txt\n\n[1 results limit reached. Use limit=2 for more, or refine pattern]"
    )
    assert result.details == {"resultLimitReached": 1}
    assert await fail(find, pattern="*", path="nope") == (  # fd's text, as the reference shows
        f"[fd error]: Search path '{tw.path('nope')}' is not a directory.\n"
        "[fd error]: No valid search paths given."
    )


async def test_ls_lists_dotfiles_and_directories(tw: ToolWorkspace) -> None:
    tw.write(".hidden-file", "x")
    tw.write(".hidden-dir/inside", "x")
    tw.write("b.txt", "x")
    tw.write("B2", "x")
    tw.write("a-b", "x")
    tw.write("a_b", "x")
    tw.write("10", "x")
    tw.write("9", "x")
    ls = create_ls_tool(tw.root, operations=tw.ops)
    assert text(await call(ls)).split("\n") == [
        ".hidden-dir/", ".hidden-file", "10", "9", "a_b", "a-b", "b.txt", "B2",
    ]  # fmt: skip
    result = await call(ls, limit=2)
    assert (
        text(result)
        == ".hidden-dir/\n.hidden-file\n\n[2 entries limit reached. Use limit=4 for more]"
    )
    assert text(await call(ls, path=".hidden-dir")) == "inside"
    assert text(await call(ls, limit=0)) == "(empty directory)"


async def test_ls_errors_and_skipped_links(tw: ToolWorkspace) -> None:
    tw.write("file.txt", "x")
    tw.write("empty/.keep", "")
    tw.symlink("dangling", "nowhere")
    tw.symlink("escaping", "$OUT/secret")
    ls = create_ls_tool(tw.root, operations=tw.ops)
    assert text(await call(ls)) == "empty/\nfile.txt"
    assert await fail(ls, path="nope") == f"Path not found: {tw.path('nope')}"
    assert await fail(ls, path="file.txt") == f"Not a directory: {tw.path('file.txt')}"


def test_relativize_find_result_path() -> None:
    assert relativize_find_result_path("/home/user/file.txt", "/") == "home/user/file.txt"
    assert relativize_find_result_path("/w/src/", "/w") == "src/"
    assert relativize_find_result_path("/other/x", "/w/sub") == "../../other/x"
    assert relativize_find_result_path("a\\b.txt", "/w") == "a\\b.txt"
