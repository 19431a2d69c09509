"""read, write and edit on every backend (pi-tools 7.1; one body, parametrised by ``tw``)."""

from __future__ import annotations

import base64
import io
import posixpath
import re

from PIL import Image

from agent_side.tools import create_edit_tool, create_read_tool, create_write_tool
from tests.tools._call import call, fail, text
from tests.tools._patch import apply_patch
from tests.tools.conftest import ToolWorkspace


def _lines(n: int, fmt: str = "Line {}") -> str:
    return "\n".join(fmt.format(i) for i in range(1, n + 1))


# --- read ------------------------------------------------------------------------------------


async def test_read_small_file_verbatim(tw: ToolWorkspace) -> None:
    tw.write("small.txt", "Hello\nWorld\n")
    result = await call(create_read_tool(tw.root, operations=tw.ops), path="small.txt")
    assert text(result) == "Hello\nWorld\n"
    assert result.details is None


async def test_read_missing_file(tw: ToolWorkspace) -> None:
    message = await fail(create_read_tool(tw.root, operations=tw.ops), path="missing.txt")
    assert message == f"ENOENT: no such file or directory, access '{tw.path('missing.txt')}'"


async def test_read_directory(tw: ToolWorkspace) -> None:
    tw.write("dir/inner.txt", "x")
    message = await fail(create_read_tool(tw.root, operations=tw.ops), path="dir")
    assert message == "EISDIR: illegal operation on a directory, read"


async def test_read_truncates_by_lines(tw: ToolWorkspace) -> None:
    tw.write("big.txt", _lines(2500))
    result = await call(create_read_tool(tw.root, operations=tw.ops), path="big.txt")
    out = text(result)
    assert "Line 1\n" in out and "Line 2000" in out and "Line 2001" not in out
    assert out.endswith("\n\n[Showing lines 1-2000 of 2500. Use offset=2001 to continue.]")
    truncation = result.details["truncation"]
    assert (truncation["truncated"], truncation["truncatedBy"]) == (True, "lines")
    assert (truncation["totalLines"], truncation["outputLines"]) == (2500, 2000)


async def test_read_truncates_by_bytes(tw: ToolWorkspace) -> None:
    tw.write("wide.txt", _lines(500, "Line {} " + "x" * 200))
    out = text(await call(create_read_tool(tw.root, operations=tw.ops), path="wide.txt"))
    assert re.search(
        r"\[Showing lines 1-\d+ of 500 \(.* limit\)\. Use offset=\d+ to continue\.\]", out
    )
    assert "(50.0KB limit)" in out


async def test_read_offsets_and_limits(tw: ToolWorkspace) -> None:
    tw.write("hundred.txt", _lines(100))
    read = create_read_tool(tw.root, operations=tw.ops)
    out = text(await call(read, path="hundred.txt", offset=51))
    assert out.startswith("Line 51\n") and out.endswith("Line 100") and "Use offset" not in out
    out = text(await call(read, path="hundred.txt", limit=10))
    assert out == _lines(10) + "\n\n[90 more lines in file. Use offset=11 to continue.]"
    out = text(await call(read, path="hundred.txt", offset=41, limit=20))
    assert out.startswith("Line 41\n") and "Line 60\n\n" in out
    assert out.endswith("[40 more lines in file. Use offset=61 to continue.]")


async def test_read_past_the_end(tw: ToolWorkspace) -> None:
    tw.write("three.txt", "a\nb\nc")
    message = await fail(create_read_tool(tw.root, operations=tw.ops), path="three.txt", offset=100)
    assert message == "Offset 100 is beyond end of file (3 lines total)"


async def test_read_quirks(tw: ToolWorkspace) -> None:
    tw.write("ab.txt", "a\nb\n")
    read = create_read_tool(tw.root, operations=tw.ops)
    assert text(await call(read, path="ab.txt", limit=2)) == (
        "a\nb\n\n[1 more lines in file. Use offset=3 to continue.]"
    )
    assert text(await call(read, path="ab.txt", offset=3)) == ""
    message = await fail(read, path="ab.txt", offset=4)
    assert message == "Offset 4 is beyond end of file (3 lines total)"
    assert text(await call(read, path="ab.txt", limit=0)) == (
        "\n\n[3 more lines in file. Use offset=1 to continue.]"
    )


async def test_read_non_integer_offset_stays_integral(tw: ToolWorkspace) -> None:
    """Parity exception: the reference shows the same lines (slice(1.5, 5.2)), but its notice
    says ``[94.8 more lines in file. Use offset=6.2 to continue.]``."""
    tw.write("hundred.txt", _lines(100))
    read = create_read_tool(tw.root, operations=tw.ops)
    out = text(await call(read, path="hundred.txt", offset=2.5, limit=3.7))
    assert out == (
        "Line 2\nLine 3\nLine 4\nLine 5\n\n[95 more lines in file. Use offset=6 to continue.]"
    )


async def test_read_first_line_too_long(tw: ToolWorkspace) -> None:
    tw.write("long.txt", "y" * 60000 + "\nshort\n")
    out = text(await call(create_read_tool(tw.root, operations=tw.ops), path="long.txt"))
    assert out == (
        "[Line 1 is 58.6KB, exceeds 50.0KB limit. Use bash: sed -n '1p' long.txt | head -c 51200]"
    )


def _png(size: tuple[int, int] = (3, 3), fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (1, 2, 3)).save(buffer, fmt)
    return buffer.getvalue()


async def test_read_images_by_magic_bytes(tw: ToolWorkspace) -> None:
    tw.write("image.txt", _png())
    tw.write("picture.bmp", _png(fmt="BMP"))
    tw.write("not-an-image.png", "just text\n")
    read = create_read_tool(tw.root, operations=tw.ops)
    result = await call(read, path="image.txt")
    assert text(result) == "Read image file [image/png]"
    image = result.content[1]
    assert image.type == "image" and image.mime_type == "image/png" and image.data
    result = await call(read, path="picture.bmp")
    assert text(result) == (
        "Read image file [image/png]\n[Image converted from image/bmp to image/png.]"
    )
    assert result.content[1].type == "image"
    assert base64.b64decode(result.content[1].data)[0] == 0x89
    result = await call(read, path="not-an-image.png")
    assert [c.type for c in result.content] == ["text"]
    assert text(result) == "just text\n"


async def test_read_macos_screenshot_name(tw: ToolWorkspace) -> None:
    tw.write("Screenshot 2024-01-01 at 10.00.00\u202fAM.png", "shot")
    read = create_read_tool(tw.root, operations=tw.ops)
    out = text(await call(read, path="@Screenshot 2024-01-01 at 10.00.00 AM.png"))
    assert out == "shot"


async def test_read_escaping_path(tw: ToolWorkspace) -> None:
    message = await fail(create_read_tool(tw.root, operations=tw.ops), path="../OUTSIDE/secret")
    resolved = posixpath.normpath(tw.path("../OUTSIDE/secret"))
    assert message == f"ESCAPES_ROOT: path escapes the workspace root, access '{resolved}'"


# --- write -----------------------------------------------------------------------------------


async def test_write_creates_parents(tw: ToolWorkspace) -> None:
    write = create_write_tool(tw.root, operations=tw.ops)
    result = await call(write, path="a/b/c.txt", content="nested\n")
    assert text(result) == "Successfully wrote to a/b/c.txt"
    assert result.details is None
    assert tw.read("a/b/c.txt") == b"nested\n"
    await call(write, path="a/b/c.txt", content="\ufeffreplaced\r\n")
    assert tw.read("a/b/c.txt") == "\ufeffreplaced\r\n".encode()


async def test_write_outside_the_root_is_refused(tw: ToolWorkspace) -> None:
    before = tw.outside_digest()
    write = create_write_tool(tw.root, operations=tw.ops)
    message = await fail(write, path=tw.outside + "/planted.txt", content="x")
    assert "ESCAPES_ROOT: path escapes the workspace root" in message
    assert tw.outside + "/planted.txt" in message or tw.outside in message
    assert tw.outside_digest() == before


async def test_write_through_dangling_link_out_of_root_is_refused(tw: ToolWorkspace) -> None:
    """Parity exception: the reference follows the link and creates the file outside."""
    tw.symlink("escape.txt", "$OUT/created-by-write")
    before = tw.outside_digest()
    message = await fail(
        create_write_tool(tw.root, operations=tw.ops), path="escape.txt", content="x"
    )
    assert "escapes the workspace root" in message
    assert tw.outside_digest() == before


# --- edit ------------------------------------------------------------------------------------


async def test_edit_simple_replace_with_diff_and_patch(tw: ToolWorkspace) -> None:
    tw.write("hello.txt", "Hello, world!\nSecond line\n")
    result = await call(
        create_edit_tool(tw.root, operations=tw.ops),
        path="hello.txt",
        edits=[{"oldText": "Hello, world!", "newText": "Hello, testing!"}],
    )
    assert text(result) == "Successfully replaced 1 block(s) in hello.txt."
    assert "Hello, testing!" in result.details["diff"]
    patch = result.details["patch"]
    for part in ("--- ", "+++ ", "@@", "-Hello, world!", "+Hello, testing!"):
        assert part in patch
    assert apply_patch("Hello, world!\nSecond line\n", patch) == "Hello, testing!\nSecond line\n"
    assert result.details["firstChangedLine"] == 1
    assert tw.read("hello.txt") == b"Hello, testing!\nSecond line\n"


async def test_edit_errors(tw: ToolWorkspace) -> None:
    tw.write("foo.txt", "foo foo foo\n")
    edit = create_edit_tool(tw.root, operations=tw.ops)
    message = await fail(edit, path="foo.txt", edits=[{"oldText": "bar", "newText": "x"}])
    assert message.startswith("Could not find the exact text in foo.txt.")
    message = await fail(edit, path="foo.txt", edits=[{"oldText": "foo", "newText": "x"}])
    assert message.startswith("Found 3 occurrences of the text in foo.txt.")
    message = await fail(edit, path="foo.txt", edits=[])
    assert message == "Edit tool input is invalid. edits must contain at least one replacement."
    missing = tw.path("missing.txt")
    message = await fail(edit, path=missing, edits=[{"oldText": "a", "newText": "b"}])
    assert message == f"Could not edit file: {missing}. Error code: ENOENT."
    tw.write("folder/inner.txt", "x")
    message = await fail(edit, path="folder", edits=[{"oldText": "a", "newText": "b"}])
    assert message == "EISDIR: illegal operation on a directory, read"
    assert tw.read("foo.txt") == b"foo foo foo\n"


async def test_edit_many_against_the_original(tw: ToolWorkspace) -> None:
    tw.write("greek.txt", "alpha\nbeta\ngamma\ndelta\n")
    edit = create_edit_tool(tw.root, operations=tw.ops)
    result = await call(
        edit,
        path="greek.txt",
        edits=[{"oldText": "alpha", "newText": "ALPHA"}, {"oldText": "gamma", "newText": "GAMMA"}],
    )
    assert text(result) == "Successfully replaced 2 block(s) in greek.txt."
    assert tw.read("greek.txt") == b"ALPHA\nbeta\nGAMMA\ndelta\n"
    tw.write("fbb.txt", "foo\nbar\nbaz\n")
    await call(
        edit,
        path="fbb.txt",
        edits=[
            {"oldText": "foo\n", "newText": "foo bar\n"},
            {"oldText": "bar\n", "newText": "BAR\n"},
        ],
    )
    assert tw.read("fbb.txt") == b"foo bar\nBAR\nbaz\n"


async def test_edit_overlap_and_partial_failure_change_nothing(tw: ToolWorkspace) -> None:
    tw.write("o.txt", "one two three\n")
    edit = create_edit_tool(tw.root, operations=tw.ops)
    message = await fail(
        edit,
        path="o.txt",
        edits=[{"oldText": "one two", "newText": "x"}, {"oldText": "two three", "newText": "y"}],
    )
    assert "overlap" in message
    message = await fail(
        edit,
        path="o.txt",
        edits=[{"oldText": "one", "newText": "1"}, {"oldText": "nine", "newText": "9"}],
    )
    assert message.startswith("Could not find edits[1] in o.txt.")
    assert tw.read("o.txt") == b"one two three\n"


async def test_edit_large_file_diff_is_compact(tw: ToolWorkspace) -> None:
    tw.write("six.txt", _lines(600, "line {}") + "\n")
    result = await call(
        create_edit_tool(tw.root, operations=tw.ops),
        path="six.txt",
        edits=[
            {"oldText": "line 100\n", "newText": "LINE 100\n"},
            {"oldText": "line 300\n", "newText": "LINE 300\n"},
            {"oldText": "line 500\n", "newText": "LINE 500\n"},
        ],
    )
    diff = result.details["diff"]
    assert all(f"LINE {n}" in diff for n in (100, 300, 500))
    assert "..." in diff and "line 250" not in diff
    assert len(diff.split("\n")) < 50


async def test_edit_keeps_bom_and_crlf(tw: ToolWorkspace) -> None:
    tw.write("crlf.txt", "\ufefffirst\r\nsecond\r\nthird\r\n")
    edit = create_edit_tool(tw.root, operations=tw.ops)
    await call(edit, path="crlf.txt", edits=[{"oldText": "second\n", "newText": "REPLACED\n"}])
    assert tw.read("crlf.txt") == "\ufefffirst\r\nREPLACED\r\nthird\r\n".encode()
    tw.write("lf.txt", "first\nsecond\n")
    await call(edit, path="lf.txt", edits=[{"oldText": "second", "newText": "REPLACED"}])
    assert tw.read("lf.txt") == b"first\nREPLACED\n"
    tw.write("dup.txt", "line\r\nline\n")
    message = await fail(edit, path="dup.txt", edits=[{"oldText": "line\n", "newText": "x\n"}])
    assert message.startswith("Found 2 occurrences")


async def test_edit_fuzzy_keeps_untouched_lines(tw: ToolWorkspace) -> None:
    tw.write("fuzzy.py", "x = \u2018a\u2019   \ny = 1   \n")
    result = await call(
        create_edit_tool(tw.root, operations=tw.ops),
        path="fuzzy.py",
        edits=[{"oldText": "x = 'a'", "newText": "x = 'b'"}],
    )
    assert tw.read("fuzzy.py") == b"x = 'b'\ny = 1   \n"
    # The diff is taken against the file as it was, not its normalised form (as the reference).
    assert result.details["diff"] == "-1 x = \u2018a\u2019   \n+1 x = 'b'\n 2 y = 1   "
    assert result.details["patch"] == (
        "--- fuzzy.py\n+++ fuzzy.py\n@@ -1,2 +1,2 @@\n-x = \u2018a\u2019   \n+x = 'b'\n y = 1   \n"
    )


async def test_edit_legacy_arguments(tw: ToolWorkspace) -> None:
    tw.write("legacy.txt", "old value\n")
    result = await call(
        create_edit_tool(tw.root, operations=tw.ops),
        path="legacy.txt",
        oldText="old value",
        newText="new value",
    )
    assert text(result) == "Successfully replaced 1 block(s) in legacy.txt."
    assert tw.read("legacy.txt") == b"new value\n"


async def test_edit_escaping_path(tw: ToolWorkspace) -> None:
    before = tw.outside_digest()
    message = await fail(
        create_edit_tool(tw.root, operations=tw.ops),
        path="../OUTSIDE/secret",
        edits=[{"oldText": "outside", "newText": "inside"}],
    )
    assert message.startswith("Could not edit file: ../OUTSIDE/secret. Error code: ")
    assert tw.outside_digest() == before
