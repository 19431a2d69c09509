"""``Gate``: the policy's decision on the path a backend actually opened.

A path string names nothing until it is resolved, and a symlink can be swapped between two
resolutions of the same string. So the policy is not decided on the string: a backend that decides
on what it opens (the broker core, the memory backend; see :class:`GatedBackend`) takes a ``gate``
with every call, resolves the path *once*, and before it uses what it resolved it asks the gate
about the root-relative path it holds (read from the opened fd, or the parent fd plus the final
name). The gate raises :class:`~operations.PolicyDenied` to refuse, and remembers the path for the
audit line. There is no second resolution to race with.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Mapping, Sequence
from typing import Literal, Protocol, runtime_checkable

from ._abort import AbortSignal
from ._errors import PolicyDenied
from ._policy import PolicyEnforcer
from ._processes import GatedProcessOperations
from ._protocols import Backend
from ._types import DirEntry, ExecResult, FileStat, OnData, SearchMatch

__all__ = ["MAX_TREE_CHECK", "Gate", "GatedBackend"]

MAX_TREE_CHECK = 10_000
"""Entries a recursive remove or a directory rename may hold to be checked against
``deny_write``; a larger tree is refused rather than moved unchecked."""


class Gate:
    """The decision of one call, asked by the backend with each root-relative path it resolved.

    Paths are ``/``-separated and relative to the workspace root (``""`` is the root). ``shown``
    is the path as the caller wrote it, for error messages; :attr:`resolved` (and, for a rename,
    :attr:`destination`) is the first path the backend reported, for the audit line.
    """

    __slots__ = ("_enforcer", "destination", "op", "resolved", "shown")

    def __init__(self, enforcer: PolicyEnforcer, op: str, shown: str) -> None:
        self._enforcer = enforcer
        self.op = op
        self.shown = shown
        self.resolved: str | None = None
        self.destination: str | None = None

    def __bool__(self) -> Literal[True]:
        return True  # so ``gate and gate.read`` is a check or ``None``

    def _note(self, rel: str) -> None:
        if self.resolved is None:
            self.resolved = rel

    def seen(self, rel: str) -> None:
        """Record ``rel`` (a stat or existence check: nothing to decide)."""
        self._note(rel)

    def read(self, rel: str) -> None:
        """Raise ``PolicyDenied`` unless ``rel`` may be read (or listed, or be a command's cwd)."""
        self._note(rel)
        self._enforcer.check_read(self.op, rel, shown=self.shown)

    def write(self, rel: str, *, shown: str | None = None) -> None:
        """Raise ``PolicyDenied`` unless ``rel`` may be created, changed or removed."""
        self._note(rel)
        self._enforcer.check_write(self.op, rel, shown=self.shown if shown is None else shown)

    def hidden(self, rel: str) -> bool:
        """Whether an entry found by a walk (glob, search) must be left out: read-denied."""
        return self._enforcer.read_denied(rel)

    def move(self, source: str, destination: str, *, shown: str | None = None) -> None:
        """Decide a rename of ``source`` to ``destination`` (or of one entry of a moved tree).

        Both ends must be writable, and a read-denied entry may not move to a readable name
        (that would undo ``deny_read``).
        """
        if self.destination is None:
            self.destination = destination
        self.write(source, shown=shown)
        self.write(destination, shown=shown)
        if self._enforcer.read_denied(source) and not self._enforcer.read_denied(destination):
            self._enforcer.check_read(self.op, source, shown=self.shown if shown is None else shown)

    def tree_too_large(self) -> PolicyDenied:
        """The refusal for a tree of more than :data:`MAX_TREE_CHECK` entries."""
        return PolicyDenied(
            self.op,
            self.shown,
            f"more than {MAX_TREE_CHECK} entries to check against deny_write; "
            "remove or move smaller parts",
            rule="deny_write: tree too large to check",
        )


@runtime_checkable
class GatedBackend(Backend, Protocol):
    """A backend that decides policy on the paths it resolves: each call takes a ``gate``.

    Every method is that of :class:`~operations.Backend` with a keyword ``gate`` (``None``: no
    policy). The backend calls the gate after resolving and before using what it resolved:
    ``read`` for reads, listings, walks and a command's cwd; ``write`` for what it creates,
    replaces or removes (each entry of a recursive remove); ``move`` for both ends of a rename
    (each entry of a moved directory); ``seen`` for stats; ``hidden`` to leave found entries out.
    """

    decides_on_resolved_paths: Literal[True]

    @property
    def processes(self) -> GatedProcessOperations:
        """Processes that outlive a call, each call naming its owner (and ``start`` its gate)."""
        ...

    async def read_file(self, path: str, *, gate: Gate | None = None) -> bytes: ...

    def read_chunks(
        self, path: str, *, chunk_size: int, gate: Gate | None = None
    ) -> AsyncIterator[bytes]: ...

    async def read_small(
        self, path: str, limit: int, *, gate: Gate | None = None
    ) -> bytes | None: ...

    async def access(
        self, path: str, *, writable: bool = False, gate: Gate | None = None
    ) -> None: ...

    async def detect_image_mime_type(
        self, path: str, *, gate: Gate | None = None
    ) -> str | None: ...

    async def exists(self, path: str, *, gate: Gate | None = None) -> bool: ...

    async def is_directory(self, path: str, *, gate: Gate | None = None) -> bool: ...

    async def stat(self, path: str, *, gate: Gate | None = None) -> FileStat: ...

    async def lstat(self, path: str, *, gate: Gate | None = None) -> FileStat: ...

    async def readdir(self, path: str, *, gate: Gate | None = None) -> list[str]: ...

    async def list_dir(self, path: str, *, gate: Gate | None = None) -> list[DirEntry]: ...

    async def glob(
        self,
        pattern: str,
        cwd: str,
        *,
        ignore: Sequence[str] = (),
        limit: int = 1000,
        gate: Gate | None = None,
    ) -> list[str]: ...

    def search(
        self,
        pattern: str,
        path: str,
        *,
        glob: str | None = None,
        ignore_case: bool = False,
        literal: bool = False,
        limit: int = 100,
        gate: Gate | None = None,
    ) -> AsyncIterator[SearchMatch]: ...

    async def write_file(
        self,
        path: str,
        content: bytes | str,
        *,
        mode: int | None = None,
        gate: Gate | None = None,
    ) -> None: ...

    async def write_chunks(
        self,
        path: str,
        chunks: AsyncIterable[bytes],
        *,
        mode: int | None = None,
        gate: Gate | None = None,
    ) -> None: ...

    async def mkdir(self, path: str, *, gate: Gate | None = None) -> None: ...

    async def remove(
        self, path: str, *, recursive: bool = False, gate: Gate | None = None
    ) -> None: ...

    async def rename(self, source: str, destination: str, *, gate: Gate | None = None) -> None: ...

    async def exec(
        self,
        command: str,
        cwd: str,
        *,
        on_data: OnData,
        signal: AbortSignal | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        gate: Gate | None = None,
    ) -> ExecResult: ...

    async def exec_powershell(
        self,
        command: str,
        cwd: str,
        *,
        on_data: OnData,
        signal: AbortSignal | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        gate: Gate | None = None,
    ) -> ExecResult: ...
