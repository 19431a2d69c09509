"""The conformance suite can fail: deliberately wrong backends do not pass its checks.

Each broken backend is a small subclass of the memory backend with one classic bug. The same
conformance test functions that run on every backend are called on it, and must fail; on the
correct memory backend (the control) they pass.
"""

from __future__ import annotations

import posixpath
from collections.abc import Awaitable, Callable, Mapping

import pytest

from operations import (
    AbortSignal,
    EscapesRoot,
    ExecResult,
    InMemoryOperations,
    IsADirectory,
    NotFound,
    OnData,
    OpsError,
)
from operations._vfs import DirNode, FileNode, LinkNode
from tests.conformance import test_cancellation, test_confinement, test_errors
from tests.conformance.backends.memory import ROOT, MemoryWorkspace, memory_workspace
from tests.conformance.test_confinement import CASES, Case

Check = Callable[[MemoryWorkspace], Awaitable[None]]


class FollowsLinksOut(InMemoryOperations):
    """Checks the requested path lexically, then follows symlinks anywhere in the namespace:
    the bug behind the MCP filesystem server's symlink CVEs."""

    def _naive(self, op: str, path: str) -> str:
        clean = posixpath.normpath(path)
        if clean != ROOT and not clean.startswith(ROOT + "/"):
            raise EscapesRoot(op, path)
        return self._follow(clean, 0)

    def _follow(self, path: str, hops: int) -> str:
        parts = path.strip("/").split("/")
        current = "/"
        for index, part in enumerate(parts):
            current = posixpath.join(current, part)
            node = self.vfs.lookup_raw(current)
            if isinstance(node, LinkNode) and hops < 40:
                rest = "/".join(parts[index + 1 :])
                spliced = posixpath.join(posixpath.dirname(current), node.target, rest)
                return self._follow(posixpath.normpath(spliced), hops + 1)
        return current

    async def read_file(self, path: str) -> bytes:
        node = self.vfs.lookup_raw(self._naive("read_file", path))
        if isinstance(node, DirNode):
            raise IsADirectory("read_file", path)
        if not isinstance(node, FileNode):
            raise NotFound("read_file", path)
        return node.data

    async def write_file(self, path: str, content: bytes | str) -> None:
        data = content.encode() if isinstance(content, str) else content
        self.vfs.put_raw(self._naive("write_file", path), FileNode(data))


class IgnoresTimeouts(InMemoryOperations):
    """Runs every command to its end, whatever the timeout says."""

    async def exec(
        self,
        command: str,
        cwd: str,
        *,
        on_data: OnData,
        signal: AbortSignal | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        return await super().exec(command, cwd, on_data=on_data, signal=signal, env=env)


class EscapesReportedAsNotFound(InMemoryOperations):
    """Confined, but reports an escape as "not found": a tool would print the wrong message."""

    async def read_file(self, path: str) -> bytes:
        try:
            return await super().read_file(path)
        except EscapesRoot:
            raise NotFound("read_file", path) from None


def case(number: int) -> Case:
    return next(c for c in CASES if c.number == number)


def confinement_read(number: int) -> Check:
    async def check(ws: MemoryWorkspace) -> None:
        await test_confinement.test_read_file(ws, case(number))

    return check


def confinement_write(number: int) -> Check:
    async def check(ws: MemoryWorkspace) -> None:
        await test_confinement.test_write_file(ws, case(number))

    return check


BROKEN: list[tuple[str, Callable[[], InMemoryOperations], list[tuple[str, Check]]]] = [
    (
        "follows-links-out",
        lambda: FollowsLinksOut(root=ROOT),
        [
            ("read 23 absolute symlink", confinement_read(23)),
            ("read 24 relative symlink", confinement_read(24)),
            ("read 25 chain escapes", confinement_read(25)),
            ("write 24 relative symlink", confinement_write(24)),
            ("paths outside the root", test_confinement.test_paths_outside_the_root),
        ],
    ),
    (
        "ignores-timeouts",
        # Scaled time: the 30 s command the broken backend lets run ends in 0.6 s.
        lambda: IgnoresTimeouts(root=ROOT, time_scale=0.02),
        [
            ("timeout kills", test_cancellation.test_timeout_kills_and_keeps_partial_output),
        ],
    ),
    (
        "escapes-as-not-found",
        lambda: EscapesReportedAsNotFound(root=ROOT),
        [
            ("read 21 path escapes", confinement_read(21)),
            ("escape is not not-found", test_errors.test_path_outside_is_escape_not_not_found),
        ],
    ),
]

PARAMS = [
    pytest.param(factory, check, id=f"{name}:{label}")
    for name, factory, checks in BROKEN
    for label, check in checks
]


@pytest.mark.parametrize(("factory", "check"), PARAMS)
async def test_broken_backend_fails_the_check(
    factory: Callable[[], InMemoryOperations], check: Check
) -> None:
    ws = memory_workspace(factory())
    with pytest.raises((AssertionError, pytest.fail.Exception, OpsError)):
        await check(ws)


@pytest.mark.parametrize(("factory", "check"), PARAMS)
async def test_correct_backend_passes_the_same_check(
    factory: Callable[[], InMemoryOperations], check: Check
) -> None:
    await check(memory_workspace(InMemoryOperations(root=ROOT)))


async def test_follows_links_out_really_leaks() -> None:
    """Not just a wrong error: the broken backend reads and writes the decoy."""
    ws = memory_workspace(FollowsLinksOut(root=ROOT))
    ws.make(["abs => $OUT/secret"])
    assert await ws.ops.read_file(ws.path("abs")) == b"outside secret"
    before = ws.outside_digest()
    await ws.ops.write_file(ws.path("abs"), b"pwned")
    assert ws.outside_digest() != before
