"""The memory backend in the conformance suite: the root is ``/ROOT`` in the virtual tree (the
name Go's test table assumes, so ``../ROOT/target`` comes back inside) and the decoy is
``/OUTSIDE`` beside it, unreachable through the backend."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from operations import InMemoryOperations, ProcessPolicy, Symlink
from operations._vfs import DirNode, FileNode, LinkNode, Node, SpecialNode
from tests.conformance._commands import register_standard_commands
from tests.conformance._workspace import Workspace, join

ROOT = "/ROOT"
OUTSIDE = "/OUTSIDE"


@dataclass
class MemoryWorkspace:
    ops: InMemoryOperations
    root: str = ROOT
    outside: str = OUTSIDE
    enforces_permissions: bool = True

    def path(self, rel: str) -> str:
        return join(self.root, rel)

    def _abs(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def _node(self, rel: str) -> Node | None:
        return self.ops.vfs.lookup_raw(self._abs(rel))

    def make(self, layout: list[str]) -> None:
        for entry in layout:
            if " => " in entry:
                name, target = entry.split(" => ", 1)
                target = target.replace("$ABS", self.root).replace("$OUT", self.outside)
                self.ops.seed({name: Symlink(target)})
            elif entry.endswith("/"):
                self.ops.seed({entry: None})
            else:
                self.ops.seed({entry: entry.rsplit("/", 1)[-1].encode()})

    def write_raw(self, rel: str, data: bytes) -> None:
        self.ops.seed({rel: data})

    def read_raw(self, rel: str) -> bytes | None:
        node = self._node(rel)
        return node.data if isinstance(node, FileNode) else None

    def readlink_raw(self, rel: str) -> str | None:
        node = self._node(rel)
        return node.target if isinstance(node, LinkNode) else None

    def is_dir_raw(self, rel: str) -> bool:
        return isinstance(self._node(rel), DirNode)

    def exists_raw(self, rel: str) -> bool:
        return self._node(rel) is not None

    def outside_digest(self) -> str:
        digest = hashlib.sha256()

        def visit(node: Node, rel: str) -> None:
            if isinstance(node, DirNode):
                digest.update(f"{rel}\0dir\0{node.mode}\0".encode())
                for name in sorted(node.children):
                    visit(node.children[name], f"{rel}/{name}")
            elif isinstance(node, FileNode):
                digest.update(f"{rel}\0file\0{node.mode}\0".encode() + node.data)
            elif isinstance(node, LinkNode):
                digest.update(f"{rel}\0link\0{node.target}".encode())
            else:
                digest.update(f"{rel}\0other\0{node.mode}".encode())

        top = self.ops.vfs.lookup_raw(self.outside)
        assert top is not None
        visit(top, "")
        return digest.hexdigest()

    def mkfifo_raw(self, rel: str) -> None:
        self.ops.vfs.put_raw(self._abs(rel), SpecialNode())

    def chmod_raw(self, rel: str, mode: int) -> None:
        node = self._node(rel)
        assert node is not None and not isinstance(node, LinkNode)
        node.mode = mode

    def mode_raw(self, rel: str) -> int:
        node = self._node(rel)
        assert node is not None
        return 0o777 if isinstance(node, LinkNode) else node.mode


def memory_workspace(ops: InMemoryOperations | None = None) -> MemoryWorkspace:
    """A workspace over ``ops`` (a fresh backend by default) with the decoy and the standard
    commands in place; also used to run conformance checks on deliberately broken subclasses."""
    ops = ops if ops is not None else InMemoryOperations(root=ROOT)
    ops.seed({f"{OUTSIDE}/secret": b"outside secret", f"{OUTSIDE}/target": b"outside target"})
    register_standard_commands(ops.commands)
    return MemoryWorkspace(ops)


@asynccontextmanager
async def open_memory(
    tmp_path: Path, *, process_policy: ProcessPolicy | None = None
) -> AsyncIterator[Workspace]:
    workspace = memory_workspace(InMemoryOperations(root=ROOT, process_policy=process_policy))
    async with workspace.ops:
        yield workspace


VARIANTS = {"memory": open_memory}
