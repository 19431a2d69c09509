"""The workspace a conformance test sees, whatever the backend behind it.

A test lays out files with :meth:`Workspace.make`, in Go ``os.Root`` test notation:

- ``"d/"`` a directory, ``"f"`` a file whose content is its own name,
- ``"a => b"`` a symlink ``a`` with target ``b``; in the target ``$ABS`` is the root's absolute path
  and ``$OUT`` the absolute path of the decoy directory outside the root.

It then calls ``ws.ops`` (the backend under test) with absolute paths built by :meth:`path`, and
checks the outcome with the unconfined helpers (``read_raw`` and friends), which look at the
workspace directly, never through the backend. ``outside`` is a decoy directory beside the root:
escape tests aim there and compare :meth:`outside_digest` before and after.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from operations import Backend


class Workspace(Protocol):
    ops: Backend
    root: str
    outside: str
    enforces_permissions: bool
    """Whether mode bits stop the backend (``False`` for a disk backend run as root)."""

    def path(self, rel: str) -> str: ...

    def make(self, layout: list[str]) -> None: ...

    def write_raw(self, rel: str, data: bytes) -> None: ...

    def read_raw(self, rel: str) -> bytes | None:
        """Content of the regular file at ``rel`` (not following a final link), or ``None``."""
        ...

    def readlink_raw(self, rel: str) -> str | None: ...

    def is_dir_raw(self, rel: str) -> bool: ...

    def exists_raw(self, rel: str) -> bool:
        """Whether anything (a dangling link included) is at ``rel``."""
        ...

    def outside_digest(self) -> str: ...

    def mkfifo_raw(self, rel: str) -> None: ...

    def chmod_raw(self, rel: str, mode: int) -> None: ...

    def mode_raw(self, rel: str) -> int:
        """Permission bits of the entry at ``rel`` (not following a final link)."""
        ...


def join(root: str, rel: str) -> str:
    """``root`` + ``/`` + ``rel``, keeping ``rel`` verbatim (dots, slashes) for resolver tests."""
    if rel == "":
        return root
    return root.rstrip("/") + "/" + rel


@dataclass
class DiskWorkspace:
    """A workspace on the real filesystem: ``tmp/ROOT`` and the decoy ``tmp/OUTSIDE``."""

    ops: Backend
    root: str
    outside: str
    enforces_permissions: bool = os.geteuid() != 0

    @classmethod
    def create_dirs(cls, tmp_path: Path) -> tuple[str, str]:
        root = tmp_path / "ROOT"
        outside = tmp_path / "OUTSIDE"
        root.mkdir()
        outside.mkdir()
        (outside / "secret").write_bytes(b"outside secret")
        (outside / "target").write_bytes(b"outside target")
        return str(root), str(outside)

    def path(self, rel: str) -> str:
        return join(self.root, rel)

    def make(self, layout: list[str]) -> None:
        for entry in layout:
            if " => " in entry:
                name, target = entry.split(" => ", 1)
                target = target.replace("$ABS", self.root).replace("$OUT", self.outside)
                full = os.path.join(self.root, name)
                os.makedirs(os.path.dirname(full), exist_ok=True)
                os.symlink(target, full)
            elif entry.endswith("/"):
                os.makedirs(os.path.join(self.root, entry), exist_ok=True)
            else:
                full = os.path.join(self.root, entry)
                os.makedirs(os.path.dirname(full), exist_ok=True)
                Path(full).write_bytes(os.path.basename(entry).encode())

    def write_raw(self, rel: str, data: bytes) -> None:
        full = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        Path(full).write_bytes(data)

    def read_raw(self, rel: str) -> bytes | None:
        full = os.path.join(self.root, rel)
        if os.path.islink(full) or not os.path.isfile(full):
            return None
        return Path(full).read_bytes()

    def readlink_raw(self, rel: str) -> str | None:
        full = os.path.join(self.root, rel)
        return os.readlink(full) if os.path.islink(full) else None

    def is_dir_raw(self, rel: str) -> bool:
        full = os.path.join(self.root, rel)
        return os.path.isdir(full) and not os.path.islink(full)

    def exists_raw(self, rel: str) -> bool:
        return os.path.lexists(os.path.join(self.root, rel))

    def outside_digest(self) -> str:
        return tree_digest(self.outside)

    def mkfifo_raw(self, rel: str) -> None:
        os.mkfifo(os.path.join(self.root, rel))

    def chmod_raw(self, rel: str, mode: int) -> None:
        os.chmod(os.path.join(self.root, rel), mode)

    def mode_raw(self, rel: str) -> int:
        return stat.S_IMODE(os.lstat(os.path.join(self.root, rel)).st_mode)


def tree_digest(top: str) -> str:
    """A hash of every name, link target, mode and content under ``top`` (links not followed)."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            digest.update(f"{os.path.relpath(full, top)}\0{st.st_mode}\0".encode())
            if os.path.islink(full):
                digest.update(os.readlink(full).encode())
            elif os.path.isfile(full):
                digest.update(Path(full).read_bytes())
    return digest.hexdigest()
