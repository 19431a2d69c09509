"""Rules taken from the reference tools (pi-tools.md) where one backend once disagreed with another.

- ``detect_image_mime_type`` sniffs by the reference's magic-byte rules (section 2.1): a PNG
  signature alone is not a PNG, ``GIF`` alone is a GIF, JPEG ``FF D8 FF F7`` is not a JPEG.
- ``glob`` and ``search`` of a subdirectory apply the ignore files of its parents, as ripgrep and
  fd do, but never one above the workspace root.
"""

from __future__ import annotations

import os

import pytest

from tests.conformance._workspace import Workspace
from tests.conformance.backends.memory import MemoryWorkspace

IHDR = b"\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (SIGNATURE + bytes(64), None),  # the signature alone: no IHDR of length 13
        (SIGNATURE, None),
        (SIGNATURE + IHDR + b"\x00\x00\x00\x08acTL" + bytes(12), None),  # animated PNG
        (SIGNATURE + IHDR, "image/png"),
        (b"\xff\xd8\xff\xf7rest", None),
        (b"\xff\xd8\xff", "image/jpeg"),
        (b"GIF8 is not a version", "image/gif"),
    ],
    ids=["signature-then-zeros", "signature-only", "apng", "ihdr", "jpeg-f7", "jpeg", "gif"],
)
async def test_image_sniff_follows_the_reference(
    ws: Workspace, content: bytes, expected: str | None
) -> None:
    ws.write_raw("picture.png", content)
    assert await ws.ops.detect_image_mime_type(ws.path("picture.png")) == expected


def write_above_root(ws: Workspace, name: str, data: bytes) -> None:
    """Put a file in the directory that holds the workspace root (outside it)."""
    if isinstance(ws, MemoryWorkspace):
        ws.ops.vfs.put_raw(f"{os.path.dirname(ws.root)}/{name}".replace("//", "/"), data)
        return
    with open(os.path.join(os.path.dirname(ws.root), name), "wb") as file:
        file.write(data)


PARENT_RULES_LAYOUT = {
    ".gitignore": b"*.log\nsub/build/\n/sub/top.txt\n",
    ".ignore": b"*.bak\n",
    "c.txt": b"hit\n",
    "sub/.gitignore": b"!keep.log\n",
    "sub/a.log": b"hit\n",
    "sub/keep.log": b"hit\n",
    "sub/c.txt": b"hit\n",
    "sub/x.bak": b"hit\n",
    "sub/top.txt": b"hit\n",
    "sub/build/out.txt": b"hit\n",
    "sub/deep/top.txt": b"hit\n",
    "sub/deep/b.log": b"hit\n",
}


def lay_out_parent_rules(ws: Workspace) -> None:
    for rel, data in PARENT_RULES_LAYOUT.items():
        ws.write_raw(rel, data)
    write_above_root(ws, ".gitignore", b"c.txt\n")  # above the root: never read
    write_above_root(ws, ".ignore", b"*.txt\n")


async def test_glob_of_a_subdirectory_applies_parent_ignore_files(ws: Workspace) -> None:
    lay_out_parent_rules(ws)
    assert await ws.ops.glob("**", ws.path("sub")) == [
        ".gitignore",
        "c.txt",
        "deep/",
        "deep/top.txt",
        "keep.log",
    ]
    assert await ws.ops.glob("*", ws.path("sub/deep")) == ["top.txt"]


async def test_glob_never_reads_ignore_files_above_the_root(ws: Workspace) -> None:
    lay_out_parent_rules(ws)
    assert await ws.ops.glob("c.txt", ws.root) == ["c.txt", "sub/c.txt"]


async def search_hits(ws: Workspace, rel: str) -> list[str]:
    base = ws.path(rel).rstrip("/") + "/"
    return [m.path.removeprefix(base) async for m in ws.ops.search("hit", ws.path(rel))]


async def test_search_of_a_subdirectory_applies_parent_ignore_files(ws: Workspace) -> None:
    lay_out_parent_rules(ws)
    assert await search_hits(ws, "sub") == ["c.txt", "deep/top.txt", "keep.log"]
    assert await search_hits(ws, "sub/deep") == ["top.txt"]


async def test_search_never_reads_ignore_files_above_the_root(ws: Workspace) -> None:
    lay_out_parent_rules(ws)
    assert await search_hits(ws, "") == ["c.txt", "sub/c.txt", "sub/deep/top.txt", "sub/keep.log"]
