"""The workspace every MCP test serves, and a decoy outside it that must never change."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
from pathlib import Path

from PIL import Image

SECRET = b"decoy secret: never read, never written\n"


def png_bytes() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 3), (200, 10, 10)).save(buffer, "PNG")
    return buffer.getvalue()


def build(root: Path, decoy: Path) -> None:
    """(Re)create the workspace under ``root`` (kept itself) and the decoy directory beside it."""
    decoy.mkdir(exist_ok=True)
    (decoy / "secret").write_bytes(SECRET)
    root.mkdir(exist_ok=True)
    for entry in root.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    (root / "a.txt").write_text("hello\nworld\n")
    (root / "dir").mkdir()
    (root / "dir" / "b.py").write_text("def f():\n    return 1\n")
    (root / ".env").write_text("TOKEN=hunter2\n")
    (root / "img.png").write_bytes(png_bytes())
    (root / "out").symlink_to(decoy)
    (root / "out_file").symlink_to(decoy / "secret")


def tree_hash(directory: Path) -> str:
    """A digest of every name, type, mode and content under ``directory`` (links not followed)."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames.sort()
        for name in sorted([*dirnames, *filenames]):
            path = Path(dirpath, name)
            info = path.lstat()
            digest.update(f"{path.relative_to(directory)}\0{info.st_mode}\0".encode())
            if path.is_symlink():
                digest.update(os.readlink(path).encode())
            elif path.is_file():
                digest.update(path.read_bytes())
    return digest.hexdigest()
