"""The backends the tool tests run on: every conformance backend, plus the memory backend.

A test takes the ``tw`` fixture (a :class:`ToolWorkspace`) and runs once per backend with the
same body. Backends come from the conformance registry (``tests/conformance/backends/``: a
backend registered there for the Operations suite runs the tool tests too); the memory backend
is added here if that registry lacks one. Commands: on the memory backend a test scripts what a
command does with :meth:`ToolWorkspace.script`; on real backends the command really runs, so the
script must say what the real command prints.
"""

from __future__ import annotations

import contextlib
import hashlib
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from operations import InMemoryOperations, Symlink
from operations._vfs import DirNode, FileNode, LinkNode
from tests.conformance.conftest import BACKENDS as CONFORMANCE_BACKENDS

MEMORY_TIME_SCALE = 0.01  # scripted seconds run 100 times faster; kills behave the same


@dataclass
class ToolWorkspace:
    """A backend under test, with unconfined helpers to lay out and inspect the workspace."""

    name: str
    ops: Any
    root: str
    outside: str
    _write: Callable[[str, bytes], None]
    _read: Callable[[str], bytes | None]
    _digest: Callable[[], str]
    _link: Callable[[str, str], None]

    @property
    def is_memory(self) -> bool:
        return isinstance(self.ops, InMemoryOperations)

    def path(self, rel: str) -> str:
        return self.root.rstrip("/") + "/" + rel if rel else self.root

    def write(self, rel: str, data: bytes | str) -> None:
        self._write(rel, data.encode() if isinstance(data, str) else data)

    def read(self, rel: str) -> bytes | None:
        return self._read(rel)

    def symlink(self, rel: str, target: str) -> None:
        """A symlink at ``rel``; in ``target`` ``$OUT`` is the decoy directory outside the root."""
        self._link(rel, target)

    def outside_digest(self) -> str:
        return self._digest()

    def script(self, command: Any, handler: Any = None, **fixed: Any) -> None:
        """On the memory backend, say what ``command`` does (see ``operations._runner``)."""
        if self.is_memory:
            self.ops.commands.register(command, handler, **fixed)


Opener = Callable[[Path], AbstractAsyncContextManager[ToolWorkspace]]


def _from_conformance(name: str) -> Opener:
    @contextlib.asynccontextmanager
    async def open_(tmp_path: Path) -> AsyncIterator[ToolWorkspace]:
        async with CONFORMANCE_BACKENDS[name](tmp_path) as ws:

            def link(rel: str, target: str) -> None:
                ws.make([f"{rel} => {target}"])

            yield ToolWorkspace(
                name, ws.ops, ws.root, ws.outside, ws.write_raw, ws.read_raw, ws.outside_digest,
                link,
            )  # fmt: skip

    return open_


@contextlib.asynccontextmanager
async def _memory(tmp_path: Path) -> AsyncIterator[ToolWorkspace]:
    ops = InMemoryOperations({"/outside/secret": b"outside secret"}, time_scale=MEMORY_TIME_SCALE)

    def write(rel: str, data: bytes) -> None:
        ops.seed({rel: data})

    def read(rel: str) -> bytes | None:
        value = ops.snapshot().get(rel)
        return value if isinstance(value, bytes) else None

    def digest() -> str:
        return hashlib.sha256(_describe(ops.vfs.lookup_raw("/outside")).encode()).hexdigest()

    def link(rel: str, target: str) -> None:
        ops.seed({rel: Symlink(target.replace("$OUT", "/outside"))})

    async with ops:
        yield ToolWorkspace("memory", ops, ops.root, "/outside", write, read, digest, link)


def _describe(node: Any) -> str:
    """Every name, target and content under a memory node, for before/after comparisons."""
    if isinstance(node, DirNode):
        return repr(sorted((name, _describe(child)) for name, child in node.children.items()))
    if isinstance(node, FileNode):
        return repr((node.data, node.mode))
    if isinstance(node, LinkNode):
        return repr(("link", node.target))
    return repr(node)


TOOL_BACKENDS: dict[str, Opener] = {name: _from_conformance(name) for name in CONFORMANCE_BACKENDS}
TOOL_BACKENDS.setdefault("memory", _memory)


@pytest.fixture(autouse=True)
def _spill_into_tmp_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Command output spilled to temp files lands in the test's directory, not in /tmp."""
    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill))


@pytest.fixture(params=sorted(TOOL_BACKENDS))
async def tw(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ToolWorkspace]:
    async with TOOL_BACKENDS[request.param](tmp_path) as workspace:
        yield workspace
