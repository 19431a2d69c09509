"""Read, write, mkdir, access, image sniffing: the file interfaces on every backend."""

from __future__ import annotations

import pytest

from operations import (
    AlreadyExists,
    IsADirectory,
    NotADirectory,
    NotFound,
    NotRegularFile,
    PermissionDenied,
)
from tests.conformance._workspace import Workspace

PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00"
    b"\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N"
)


async def test_read_file_returns_exact_bytes(ws: Workspace) -> None:
    data = bytes(range(256)) * 4 + b"\r\n\0end"
    ws.write_raw("bin.dat", data)
    ws.write_raw("empty", b"")
    assert await ws.ops.read_file(ws.path("bin.dat")) == data
    assert await ws.ops.read_file(ws.path("empty")) == b""


async def test_read_file_errors(ws: Workspace) -> None:
    ws.make(["d/", "f"])
    ws.mkfifo_raw("fifo")
    with pytest.raises(NotFound):
        await ws.ops.read_file(ws.path("missing"))
    with pytest.raises(IsADirectory):
        await ws.ops.read_file(ws.path("d"))
    with pytest.raises(NotRegularFile):
        await ws.ops.read_file(ws.path("fifo"))
    with pytest.raises(NotADirectory):
        await ws.ops.read_file(ws.path("f/"))
    with pytest.raises(NotADirectory):
        await ws.ops.read_file(ws.path("f/x"))
    with pytest.raises(NotFound):
        await ws.ops.read_file(ws.path("missing/x"))


async def test_write_file_creates_and_replaces(ws: Workspace) -> None:
    await ws.ops.write_file(ws.path("new.txt"), b"one")
    assert ws.read_raw("new.txt") == b"one"
    await ws.ops.write_file(ws.path("new.txt"), "twö")
    assert ws.read_raw("new.txt") == "twö".encode()
    assert ws.mode_raw("new.txt") & 0o600 == 0o600, (
        "a new file is readable and writable by its owner"
    )


async def test_write_file_keeps_mode_of_replaced_file(ws: Workspace) -> None:
    ws.write_raw("script.sh", b"old")
    ws.chmod_raw("script.sh", 0o751)
    await ws.ops.write_file(ws.path("script.sh"), b"new")
    assert ws.read_raw("script.sh") == b"new"
    assert ws.mode_raw("script.sh") == 0o751
    assert (await ws.ops.stat(ws.path("script.sh"))).mode & 0o777 == 0o751


async def test_write_file_errors(ws: Workspace) -> None:
    ws.make(["d/", "f"])
    with pytest.raises(NotFound):
        await ws.ops.write_file(ws.path("missing/x.txt"), b"x")
    with pytest.raises(IsADirectory):
        await ws.ops.write_file(ws.path("d"), b"x")
    with pytest.raises(NotADirectory):
        await ws.ops.write_file(ws.path("f/x.txt"), b"x")
    assert ws.is_dir_raw("d")
    assert ws.read_raw("f") == b"f"


async def test_write_file_through_symlink_inside_root(ws: Workspace) -> None:
    ws.make(["real", "link => real", "dangling => created", "d/", "dlink => d"])
    await ws.ops.write_file(ws.path("link"), b"via link")
    assert ws.read_raw("real") == b"via link"
    assert ws.readlink_raw("link") == "real"
    await ws.ops.write_file(ws.path("dangling"), b"made")
    assert ws.read_raw("created") == b"made"
    assert ws.readlink_raw("dangling") == "created"
    await ws.ops.write_file(ws.path("dlink/inner"), b"inner")
    assert ws.read_raw("d/inner") == b"inner"


async def test_mkdir_creates_parents_and_tolerates_existing(ws: Workspace) -> None:
    ws.make(["d/", "dlink => d"])
    await ws.ops.mkdir(ws.path("a/b/c"))
    assert ws.is_dir_raw("a/b/c")
    await ws.ops.mkdir(ws.path("a/b/c"))
    await ws.ops.mkdir(ws.path("a/b"))
    await ws.ops.mkdir(ws.path("dlink"))
    await ws.ops.mkdir(ws.path("dlink/sub"))
    assert ws.is_dir_raw("d/sub")
    assert ws.readlink_raw("dlink") == "d"


async def test_mkdir_errors(ws: Workspace) -> None:
    ws.make(["f", "dangling => nowhere"])
    with pytest.raises(AlreadyExists):
        await ws.ops.mkdir(ws.path("f"))
    with pytest.raises(NotADirectory):
        await ws.ops.mkdir(ws.path("f/sub"))
    with pytest.raises(AlreadyExists):
        await ws.ops.mkdir(ws.path("dangling"))
    assert ws.read_raw("f") == b"f"
    assert not ws.exists_raw("nowhere")


async def test_access(ws: Workspace) -> None:
    ws.make(["f", "d/", "link => f"])
    await ws.ops.access(ws.path("f"))
    await ws.ops.access(ws.path("f"), writable=True)
    await ws.ops.access(ws.path("d"))
    await ws.ops.access(ws.path("link"), writable=True)
    with pytest.raises(NotFound):
        await ws.ops.access(ws.path("missing"))
    with pytest.raises(NotFound):
        await ws.ops.access(ws.path("missing"), writable=True)


async def test_permission_denied(ws: Workspace) -> None:
    """Mode bits stop the backend unless it runs as root (then the same calls succeed)."""
    ws.make(["locked", "ro", "rodir/"])
    ws.chmod_raw("locked", 0o000)
    ws.chmod_raw("ro", 0o444)
    ws.chmod_raw("rodir", 0o555)
    try:
        if ws.enforces_permissions:
            with pytest.raises(PermissionDenied):
                await ws.ops.read_file(ws.path("locked"))
            with pytest.raises(PermissionDenied):
                await ws.ops.access(ws.path("locked"))
            await ws.ops.access(ws.path("ro"))
            with pytest.raises(PermissionDenied):
                await ws.ops.access(ws.path("ro"), writable=True)
            with pytest.raises(PermissionDenied):
                await ws.ops.write_file(ws.path("rodir/new"), b"x")
            with pytest.raises(PermissionDenied):
                await ws.ops.mkdir(ws.path("rodir/sub"))
            assert not ws.exists_raw("rodir/new")
        else:
            assert await ws.ops.read_file(ws.path("locked")) == b"locked"
            await ws.ops.access(ws.path("ro"), writable=True)
    finally:
        ws.chmod_raw("rodir", 0o755)
        ws.chmod_raw("locked", 0o644)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (PNG, "image/png"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", "image/jpeg"),
        (b"GIF89a\x01\x00\x01\x00", "image/gif"),
        (b"RIFF\x24\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"just text, named like an image", None),
        (b"", None),
    ],
)
async def test_detect_image_mime_type(ws: Workspace, content: bytes, expected: str | None) -> None:
    ws.write_raw("picture.png", content)
    assert await ws.ops.detect_image_mime_type(ws.path("picture.png")) == expected


async def test_detect_image_mime_type_missing(ws: Workspace) -> None:
    with pytest.raises(NotFound):
        await ws.ops.detect_image_mime_type(ws.path("missing.png"))
