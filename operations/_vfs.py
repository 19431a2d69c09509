"""The memory backend's tree, and its resolver with Go ``os.Root`` semantics.

The tree is a whole namespace (``/`` down), so a harness can put a decoy beside the root
(``/outside``) and prove nothing reaches it. Only paths under :attr:`VirtualTree.root` are
reachable through :meth:`VirtualTree.resolve`, with the rules of DESIGN.md section 4:

- the path must be absolute and start with the root (``/workspace/...``); anything else, or a
  ``..`` that climbs above the root (even if it comes back), is :class:`~operations.EscapesRoot`;
- symlinks are followed physically (a link's target is spliced in before a later ``..`` applies);
  an absolute target is an escape, even one that points inside the root;
- at most :data:`MAX_SYMLINKS` links per resolution, then :class:`~operations.TooManyLinks`;
- a trailing ``/`` requires a directory: after a file it is NotADirectory, and a final symlink
  before it is followed (confined) even by operations that otherwise do not follow it; a
  trailing ``/.`` also requires the directory to exist;
- permission bits are honoured as for a non-root owner: ``x`` to pass through a directory, ``r``
  to list it or read a file, ``w`` to change a directory's entries or write a file.

Nothing here is async: the backend calls it between awaits, so every operation is atomic.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ._errors import (
    EscapesRoot,
    InvalidArgument,
    NotADirectory,
    NotFound,
    PermissionDenied,
    TooManyLinks,
)
from ._types import FileKind, FileStat

__all__ = [
    "MAX_SYMLINKS",
    "NAME_MAX",
    "PATH_MAX",
    "DirNode",
    "FileNode",
    "LinkNode",
    "Node",
    "Resolved",
    "SpecialNode",
    "VirtualTree",
    "kind_of",
    "stat_of",
]

MAX_SYMLINKS = 40
"""Links followed in one resolution before TooManyLinks: Linux's limit, which openat2 applies."""

PATH_MAX = 4096
"""Longest path, in UTF-8 bytes (Linux's PATH_MAX): longer is InvalidArgument."""

NAME_MAX = 255
"""Longest file name, in UTF-8 bytes (Linux's NAME_MAX): longer is InvalidArgument."""

DIRECTORY_SIZE = 4096
"""What ``stat`` reports as a directory's size, as ext4 does for a small directory."""

_DIR_MARK = "/"
"""Token for a trailing slash: the component before it must be a directory."""


@dataclass(eq=False)
class FileNode:
    data: bytes
    mode: int = 0o644
    mtime: float = 0.0


@dataclass(eq=False)
class DirNode:
    children: dict[str, Node] = field(default_factory=dict)
    mode: int = 0o755
    mtime: float = 0.0


@dataclass(eq=False)
class LinkNode:
    target: str
    mtime: float = 0.0


@dataclass(eq=False)
class SpecialNode:
    """A FIFO (or anything else that is not a file, directory or link): never opened."""

    mode: int = 0o644
    mtime: float = 0.0


Node = FileNode | DirNode | LinkNode | SpecialNode


def kind_of(node: Node) -> FileKind:
    if isinstance(node, FileNode):
        return FileKind.FILE
    if isinstance(node, DirNode):
        return FileKind.DIRECTORY
    if isinstance(node, LinkNode):
        return FileKind.SYMLINK
    return FileKind.OTHER


def stat_of(node: Node) -> FileStat:
    if isinstance(node, FileNode):
        return FileStat(FileKind.FILE, len(node.data), node.mode & 0o7777, node.mtime)
    if isinstance(node, DirNode):
        return FileStat(FileKind.DIRECTORY, DIRECTORY_SIZE, node.mode & 0o7777, node.mtime)
    if isinstance(node, LinkNode):
        return FileStat(FileKind.SYMLINK, len(node.target.encode()), 0o777, node.mtime)
    return FileStat(FileKind.OTHER, 0, node.mode & 0o7777, node.mtime)


@dataclass
class Resolved:
    """Where a path led.

    ``parent`` holds the final entry ``name``; ``node`` is that entry, or ``None`` when nothing is
    there yet. When the path ends on a directory through ``.``, ``..`` or the root itself,
    ``name`` is ``None`` and ``node`` is that directory. ``dirs`` is the chain of directories from
    the root to ``parent``; ``rel`` the physical path of the final entry, relative to the root.
    """

    parent: DirNode
    name: str | None
    node: Node | None
    dir_required: bool
    via_final_link: bool
    dirs: tuple[DirNode, ...]
    rel: str


def _tokens(path: str) -> list[str]:
    tokens = [part for part in path.split("/") if part]
    if path.endswith("/") and tokens:
        tokens.append(_DIR_MARK)
    return tokens


def _normalize_root(root: str) -> str:
    if not root.startswith("/") or "\0" in root:
        raise ValueError(f"the root must be an absolute path, not {root!r}")
    parts = [p for p in root.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise ValueError(f"the root must be a clean path without '.' or '..', not {root!r}")
    return "/" + "/".join(parts)


class VirtualTree:
    """A namespace of nodes with one confined root (see the module docstring)."""

    def __init__(self, root: str = "/workspace", *, clock: Callable[[], float] = time.time) -> None:
        self.root = _normalize_root(root)
        self.clock = clock
        self.top = DirNode(mtime=clock())
        self.root_parts = tuple(p for p in self.root.split("/") if p)
        self.root_dir = self.make_dirs(self.root)

    # -- raw access (no confinement, no permission checks): seeding and inspection ----------

    def make_dirs(self, abs_path: str) -> DirNode:
        """Create ``abs_path`` and its parents as directories (raw; links are not followed)."""
        current = self.top
        for part in (p for p in abs_path.split("/") if p):
            child = current.children.get(part)
            if child is None:
                child = DirNode(mtime=self.clock())
                current.children[part] = child
            if not isinstance(child, DirNode):
                raise ValueError(f"{abs_path!r}: {part!r} exists and is not a directory")
            current = child
        return current

    def lookup_raw(self, abs_path: str) -> Node | None:
        """The node at ``abs_path``, following no link at all; ``None`` if nothing is there."""
        node: Node = self.top
        for part in (p for p in abs_path.split("/") if p):
            if not isinstance(node, DirNode):
                return None
            found = node.children.get(part)
            if found is None:
                return None
            node = found
        return node

    def put_raw(self, abs_path: str, node: Node) -> None:
        """Place ``node`` at ``abs_path`` (raw), creating parent directories."""
        parent_path, _, name = abs_path.rstrip("/").rpartition("/")
        if not name:
            raise ValueError(f"cannot replace {abs_path!r}")
        self.make_dirs(parent_path).children[name] = node

    # -- confined resolution -----------------------------------------------------------------

    def relative(self, op: str, path: str) -> str:
        """The part of ``path`` below the root, verbatim (dots kept); raise if it is not below.

        Paths are absolute and must start with the root, component by component, as on the
        broker core; anything else (relative, empty, NUL, not UTF-8, too long) is refused.
        """
        if not isinstance(path, str) or path == "":
            raise InvalidArgument(op, path if isinstance(path, str) else None, "empty path")
        if "\0" in path:
            raise InvalidArgument(op, path, "path contains a NUL byte")
        try:
            size = len(path.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidArgument(op, path, "path is not valid UTF-8") from None
        if size > PATH_MAX:
            raise InvalidArgument(op, path, f"path longer than {PATH_MAX} bytes")
        if not path.startswith("/"):
            raise InvalidArgument(op, path, f"expected an absolute path under {self.root}")
        parts = path.split("/")
        index = 0
        for root_part in self.root_parts:
            while index < len(parts) and parts[index] == "":
                index += 1
            if index >= len(parts) or parts[index] != root_part:
                raise EscapesRoot(op, path, f"path is outside the workspace root {self.root}")
            index += 1
        return "/".join(parts[index:])

    def resolve(
        self,
        op: str,
        path: str,
        *,
        follow: bool,
        create_dirs: bool = False,
        on_create: Callable[[str], None] | None = None,
    ) -> Resolved:
        """Resolve ``path`` beneath the root.

        Args:
            follow: follow a final symlink (always followed before a trailing slash).
            create_dirs: create missing intermediate directories (``mkdir -p``).
            on_create: called with the root-relative path of each directory before it is
                created (a gate's ``write``; it raises to refuse).

        Raises:
            InvalidArgument, EscapesRoot, NotFound (a missing intermediate), NotADirectory,
            TooManyLinks, PermissionDenied.
        """
        rel = self.relative(op, path)
        todo = list(reversed(_tokens(rel)))
        stack: list[tuple[str, DirNode]] = []
        current = self.root_dir
        links = 0
        via_link = False
        while todo:
            token = todo.pop()
            if token in (".", _DIR_MARK):
                continue
            if token == "..":
                if not stack:
                    raise EscapesRoot(op, path)  # the core's words: no root path in the text
                stack.pop()
                current = stack[-1][1] if stack else self.root_dir
                continue
            if len(token.encode("utf-8", "surrogateescape")) > NAME_MAX:
                raise InvalidArgument(op, path, f"file name longer than {NAME_MAX} bytes")
            # Only a trailing slash keeps a name final; "name/." walks through name, so name
            # must exist (as in Linux: open("missing/.", O_CREAT) is ENOENT, not EISDIR).
            final = all(t == _DIR_MARK for t in todo)
            need_dir = final and bool(todo)
            if not current.mode & 0o100:
                raise PermissionDenied(op, path, "a directory on the path is not searchable")
            child = current.children.get(token)
            if child is None:
                if final:
                    return self._resolved(current, token, None, need_dir, via_link, stack)
                if not create_dirs:
                    raise NotFound(op, path)
                self.require_writable_dir(op, path, current)
                if on_create is not None:
                    on_create("/".join([*(n for n, _ in stack), token]))
                child = DirNode(mtime=self.clock())
                current.children[token] = child
            if isinstance(child, LinkNode) and (follow or not final or need_dir):
                links += 1
                if links > MAX_SYMLINKS:
                    raise TooManyLinks(op, path)
                if child.target.startswith("/"):
                    raise EscapesRoot(op, path, f"symlink {token!r} has an absolute target")
                if child.target == "":
                    raise NotFound(op, path, f"symlink {token!r} has an empty target")
                via_link = via_link or final
                todo.extend(reversed(_tokens(child.target)))
                continue
            if final:
                if need_dir and not isinstance(child, DirNode):
                    raise NotADirectory(op, path)
                return self._resolved(current, token, child, need_dir, via_link, stack)
            if not isinstance(child, DirNode):
                raise NotADirectory(op, path)
            stack.append((token, child))
            current = child
        # The path ended on a directory through ".", ".." or a link to one (or is the root):
        # report the directory itself, with no name to create or remove.
        parent = stack[-2][1] if len(stack) >= 2 else self.root_dir
        dirs = (self.root_dir, *(d for _, d in stack[:-1]))
        rel_path = "/".join(n for n, _ in stack)
        return Resolved(parent, None, current, True, via_link, dirs, rel_path)

    def _resolved(
        self,
        parent: DirNode,
        name: str,
        node: Node | None,
        need_dir: bool,
        via_link: bool,
        stack: list[tuple[str, DirNode]],
    ) -> Resolved:
        dirs = (self.root_dir, *(d for _, d in stack))
        rel = "/".join([*(n for n, _ in stack), name])
        return Resolved(parent, name, node, need_dir, via_link, dirs, rel)

    # -- permission checks ------------------------------------------------------------------

    @staticmethod
    def require_writable_dir(op: str, path: str, directory: DirNode) -> None:
        if (directory.mode & 0o300) != 0o300:
            raise PermissionDenied(op, path, "the directory is not writable")

    @staticmethod
    def require_mode(op: str, path: str, node: Node, bits: int, what: str) -> None:
        if isinstance(node, LinkNode):
            return
        if (node.mode & bits) != bits:
            raise PermissionDenied(op, path, f"not {what}")
