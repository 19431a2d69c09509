"""Issue-16 differences, on every backend: the reference's exact text (from
``scripts/compare_reference.py``, Pi 0.85.0), or the declared difference of ``docs/parity.md``."""

from __future__ import annotations

from typing import Any

import pytest

from agent_side import ToolCall, ToolValidationError, validate_tool_arguments
from agent_side.tools import (
    create_edit_tool,
    create_find_tool,
    create_grep_tool,
    create_ls_tool,
    create_read_tool,
)
from tests.tools._call import call, fail, text
from tests.tools.conftest import ToolWorkspace

PNG_HEAD = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR"


def tree(tw: ToolWorkspace) -> None:
    for rel, data in {
        "a.txt": "alpha\n",
        "b.txt": "beta\n",
        "c.txt": "gamma\n",
        "nested/x.py": "x = 1\n",
        "nested/deep/y.py": "y = 2\n",
        "src/m.py": "import os\n",
    }.items():
        tw.write(rel, data)


@pytest.mark.parametrize(
    ("name", "data", "mime"),
    [("bad.png", PNG_HEAD + b"\0" * 40, "image/png"), ("g.txt", b"GIF8 is text\n", "image/gif")],
)
async def test_read_undecodable_image_is_omitted(
    tw: ToolWorkspace, name: str, data: bytes, mime: str
) -> None:
    tw.write(name, data)
    result = await call(create_read_tool(tw.root, operations=tw.ops), path=name)
    assert [block.type for block in result.content] == ["text"]
    assert text(result) == (
        f"Read image file [{mime}]\n"
        "[Image omitted: could not be resized below the inline image size limit.]"
    )


async def test_fractional_limits_show_the_references_items(tw: ToolWorkspace) -> None:
    """Declared (parity.md 1): the same entries as the reference; whole numbers in notices
    where it prints ``[2.5 entries limit reached. Use limit=5 for more]``."""
    tree(tw)
    ls = await call(create_ls_tool(tw.root, operations=tw.ops), limit=2.5)
    assert text(ls) == "a.txt\nb.txt\nc.txt\n\n[3 entries limit reached. Use limit=6 for more]"
    assert ls.details == {"entryLimitReached": 3}
    grep = await call(create_grep_tool(tw.root, operations=tw.ops), pattern="a", limit=1.5)
    assert text(grep) == (
        "a.txt:1: alpha\nb.txt:1: beta\n\n"
        "[2 matches limit reached. Use limit=4 for more, or refine pattern]"
    )
    find = await call(create_find_tool(tw.root, operations=tw.ops), pattern="*.txt", limit=1.5)
    assert text(find) == (
        "a.txt\nb.txt\n\n[2 results limit reached. Use limit=4 for more, or refine pattern]"
    )
    read = await call(
        create_read_tool(tw.root, operations=tw.ops), path="a.txt", offset=1.5, limit=0.5
    )
    assert text(read) == "alpha\n\n[1 more lines in file. Use offset=2 to continue.]"


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
async def test_non_finite_numbers_never_reach_the_model_as_python_text(
    tw: ToolWorkspace, value: float
) -> None:
    """A hook may set a value without revalidation: the tools still answer in their own words."""
    tree(tw)
    tools = [
        (create_read_tool(tw.root, operations=tw.ops), {"path": "a.txt", "offset": value}),
        (create_read_tool(tw.root, operations=tw.ops), {"path": "a.txt", "limit": value}),
        (create_ls_tool(tw.root, operations=tw.ops), {"limit": value}),
        (create_find_tool(tw.root, operations=tw.ops), {"pattern": "*.txt", "limit": value}),
        (create_grep_tool(tw.root, operations=tw.ops), {"pattern": "a", "limit": value}),
        (create_grep_tool(tw.root, operations=tw.ops), {"pattern": "a", "context": value}),
    ]
    for tool, args in tools:
        plain = {k: v for k, v in args.items() if isinstance(v, str)}
        params = validate_tool_arguments(tool, ToolCall(id="c", name=tool.name, arguments=plain))
        for key, item in args.items():
            setattr(params, key, item)
        try:
            await tool.execute("c", params, None, None)
        except Exception as exc:
            assert "convert" not in str(exc) and "float" not in str(exc), str(exc)


@pytest.mark.parametrize("tool_name", ["read", "ls"])
@pytest.mark.parametrize("value", ["Infinity", "-Infinity", 1e400])
def test_infinite_numbers_are_refused(tmp_path: Any, tool_name: str, value: Any) -> None:
    tool = (create_read_tool if tool_name == "read" else create_ls_tool)(str(tmp_path))
    key = "offset" if tool_name == "read" else "limit"
    args: dict[str, Any] = {"path": "a", key: value} if tool_name == "read" else {key: value}
    with pytest.raises(ToolValidationError) as caught:
        validate_tool_arguments(tool, ToolCall(id="c", name=tool_name, arguments=args))
    assert f"  - {key}: must be number\n\nReceived arguments:\n" in str(caught.value)


def test_unnamed_properties_are_kept(tmp_path: Any) -> None:
    read = create_read_tool(str(tmp_path))
    args = validate_tool_arguments(
        read, ToolCall(id="c", name="read", arguments={"path": "a", "extra": 1})
    )
    assert args.model_dump(by_alias=True, exclude_unset=True) == {"path": "a", "extra": 1}
    edit = create_edit_tool(str(tmp_path))
    raw = {"path": "a", "edits": [{"oldText": "x", "newText": "y", "note": 1}]}
    args = validate_tool_arguments(edit, ToolCall(id="c", name="edit", arguments=raw))
    assert args.model_dump(by_alias=True, exclude_unset=True) == raw
    assert "additionalProperties" not in str(read.parameters_schema)


async def test_find_errors_are_fds(tw: ToolWorkspace) -> None:
    tree(tw)
    find = create_find_tool(tw.root, operations=tw.ops)
    for path in ("missing", "a.txt"):
        assert await fail(find, pattern="*.py", path=path) == (
            f"[fd error]: Search path '{tw.path(path)}' is not a directory.\n"
            "[fd error]: No valid search paths given."
        )
    assert await fail(find, pattern="[") == (
        "[fd error]: error parsing glob '[': unclosed character class; missing ']'"
    )
    assert await fail(find, pattern="src/[") == (
        "[fd error]: error parsing glob '**/src/[': unclosed character class; missing ']'"
    )


async def test_find_glob_dialect_and_limit_zero(tw: ToolWorkspace) -> None:
    tree(tw)
    find = create_find_tool(tw.root, operations=tw.ops)
    assert text(await call(find, pattern="nested/**")) == (
        "nested/deep/\nnested/deep/y.py\nnested/x.py"
    )
    assert text(await call(find, pattern="/src/*.py")) == "No files found matching pattern"
    absolute = tw.path("src").rstrip("/") + "/*.py"
    assert text(await call(find, pattern=absolute)) == "src/m.py"
    assert text(await call(find, pattern="*.txt", limit=0)) == (
        "a.txt\nb.txt\nc.txt\n\n[0 results limit reached. Use limit=0 for more, or refine pattern]"
    )


async def test_find_path_pattern_matches_at_any_depth(tw: ToolWorkspace) -> None:
    """fd's ``--full-path`` with the ``**/`` the reference puts in front of ``src/*.py``."""
    for rel in ("src/a.py", "src/sub/b.py", "lib/src/c.py", "lib/src/deep/d.py", "lib/x/src/e.py"):
        tw.write(rel, "x\n")
    find = create_find_tool(tw.root, operations=tw.ops)
    assert text(await call(find, pattern="src/*.py")) == "lib/src/c.py\nlib/x/src/e.py\nsrc/a.py"
    assert text(await call(find, pattern="src/*.py", path="lib")) == "src/c.py\nx/src/e.py"
    # The search path's own components take part, as in fd: lib/src/c.py is "src/*.py".
    assert text(await call(find, pattern="src/*.py", path="lib/src")) == "c.py"
    assert text(await call(find, pattern="**/src/*.py", path="lib/src")) == "c.py"


async def test_grep_binary_file_named_directly_and_bom(tw: ToolWorkspace) -> None:
    tw.write("bin.dat", b"match here\x00\x01\nmatch again\n")
    tw.write("bom.txt", "\ufeffmatch first\nmatch second\n")
    grep = create_grep_tool(tw.root, operations=tw.ops)
    assert text(await call(grep, pattern="match", path="bin.dat")) == (
        "bin.dat:1: match here\x00\x01\nbin.dat:2: match again"
    )
    assert text(await call(grep, pattern="match")) == (
        "bom.txt:1: match first\nbom.txt:2: match second"
    )
    assert text(await call(grep, pattern="^match f")) == "bom.txt:1: match first"


async def test_grep_invalid_regex_is_rgs_message(tw: ToolWorkspace) -> None:
    tw.write("a.txt", "a\n")
    grep = create_grep_tool(tw.root, operations=tw.ops)
    assert await fail(grep, pattern="(unclosed") == (
        "rg: regex parse error:\n    (?:(unclosed)\n    ^\nerror: unclosed group"
    )
    assert await fail(grep, pattern="a[b") == (
        "rg: regex parse error:\n    (?:a[b)\n        ^\nerror: unclosed character class"
    )
    other = await fail(grep, pattern="(?P<x>a)(?P<x>b)")
    assert other.startswith("rg: regex parse error:\n    (?:(?P<x>a)(?P<x>b))\n")
    assert other.endswith('set "literal": true to search for the text)')
