"""Where a tool works: its operations, its working directory, and what ``~`` means there.

Each tool is typed by the Operations interfaces it calls (``read`` takes a
:class:`~operations.ReadOperations`, ``ls`` a :class:`~operations.LsOperations`, ...); a set of
tools takes :class:`ToolOperations`, all of them at once, which every
:class:`~operations.Backend` is.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Generic, Protocol, TypeVar, runtime_checkable

from operations import (
    AbortSignal,
    Backend,
    BashOperations,
    EditOperations,
    EscapesRoot,
    ExecResult,
    FileStat,
    FindOperations,
    GrepOperations,
    LsOperations,
    OnData,
    PolicyDenied,
    PowerShellOperations,
    ReadOperations,
    SearchMatch,
    WriteOperations,
)

from .._connect import connect
from .._tool import ToolContext
from ._errors import ToolError, describe_error
from ._paths import resolve_to_cwd

__all__ = ["LocalOperations", "PowerShellHost", "ToolOperations", "Workspace"]


@runtime_checkable
class PowerShellHost(Protocol):
    """A backend whose ``exec`` is bash and whose ``powershell`` member runs PowerShell."""

    @property
    def powershell(self) -> PowerShellOperations: ...


class ToolOperations(
    ReadOperations,
    WriteOperations,
    EditOperations,
    LsOperations,
    FindOperations,
    GrepOperations,
    BashOperations,
    PowerShellHost,
    Protocol,
):
    """Everything the built-in tools call, for a set of tools over one backend."""


@runtime_checkable
class _Rooted(Protocol):
    @property
    def root(self) -> str: ...


class _Exists(Protocol):
    async def exists(self, path: str) -> bool: ...


class LocalOperations:
    """The ``local:`` backend rooted at ``root``, connected on first use.

    Tools created without ``operations`` get one of these, so importing or creating a tool never
    starts a backend. It offers what the tools call (:class:`ToolOperations`), nothing more.
    """

    def __init__(self, root: str) -> None:
        self._root = os.path.abspath(root)
        self._url = "local:" + self._root
        self._backend: Backend | None = None

    @property
    def root(self) -> str:
        """The workspace root (known without opening the backend)."""
        return self._root

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove ``path`` (the shell tools prune their saved outputs with it)."""
        await self._open().remove(path, recursive=recursive)

    def _open(self) -> Backend:
        if self._backend is None:
            self._backend = connect(self._url)
        return self._backend

    async def aclose(self) -> None:
        """Close the backend if it was ever opened."""
        if self._backend is not None:
            backend, self._backend = self._backend, None
            await backend.aclose()

    async def read_file(self, path: str) -> bytes:
        return await self._open().read_file(path)

    async def access(self, path: str, *, writable: bool = False) -> None:
        await self._open().access(path, writable=writable)

    async def detect_image_mime_type(self, path: str) -> str | None:
        return await self._open().detect_image_mime_type(path)

    async def write_file(self, path: str, content: bytes | str, *, mode: int | None = None) -> None:
        await self._open().write_file(path, content, mode=mode)

    async def mkdir(self, path: str) -> None:
        await self._open().mkdir(path)

    async def exists(self, path: str) -> bool:
        return await self._open().exists(path)

    async def stat(self, path: str) -> FileStat:
        return await self._open().stat(path)

    async def readdir(self, path: str) -> list[str]:
        return await self._open().readdir(path)

    async def is_directory(self, path: str) -> bool:
        return await self._open().is_directory(path)

    async def glob(
        self, pattern: str, cwd: str, *, ignore: Sequence[str] = (), limit: int = 1000
    ) -> list[str]:
        return await self._open().glob(pattern, cwd, ignore=ignore, limit=limit)

    def search(
        self,
        pattern: str,
        path: str,
        *,
        glob: str | None = None,
        ignore_case: bool = False,
        literal: bool = False,
        limit: int = 100,
    ) -> AsyncIterator[SearchMatch]:
        return self._open().search(
            pattern, path, glob=glob, ignore_case=ignore_case, literal=literal, limit=limit
        )

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
        return await self._open().exec(
            command, cwd, on_data=on_data, signal=signal, timeout=timeout, env=env
        )

    @property
    def powershell(self) -> PowerShellOperations:
        return self._open().powershell


OpsT = TypeVar("OpsT")
ExistsT = TypeVar("ExistsT", bound=_Exists)


class Workspace(Generic[OpsT]):
    """The operations a tool was created with and how it resolves paths.

    Args:
        cwd: the working directory, absolute in the backend's namespace (a relative one is taken
            from the backend's root).
        operations: the backend, typed by the interfaces the tool calls; ``None`` for the
            ``local:`` backend rooted at ``cwd``.
        home: what ``~`` expands to; by default the backend's root, since the agent's own home
            directory means nothing on a remote workspace.
    """

    def __init__(self, cwd: str, operations: OpsT | None, home: str | None) -> None:
        if operations is None:
            cwd = os.path.abspath(cwd)  # the default backend is this machine
        self.ops: OpsT | LocalOperations = (
            operations if operations is not None else LocalOperations(cwd)
        )
        root = self._root()
        self.cwd = cwd if cwd.startswith("/") or root is None else posixpath.join(root, cwd)
        self._home = home

    def _root(self) -> str | None:
        if isinstance(self.ops, LocalOperations) or not isinstance(self.ops, _Rooted):
            return None
        root = self.ops.root
        return root if isinstance(root, str) else None

    @property
    def is_default_local(self) -> bool:
        """Whether the tool runs on the ``local:`` backend it made itself (paths are ours)."""
        return isinstance(self.ops, LocalOperations)

    @property
    def home(self) -> str:
        if self._home is not None:
            return self._home
        return self._root() or self.cwd

    def cwd_for(self, ctx: ToolContext | None) -> str:
        """The session's current directory wins over the one the tool was created with."""
        if ctx is not None and ctx.cwd:
            return ctx.cwd
        return self.cwd

    def resolve(self, path: str, ctx: ToolContext | None) -> str:
        """``path`` as the model wrote it, made absolute against the current directory."""
        return resolve_to_cwd(path, self.cwd_for(ctx), home=self.home)

    async def existing(self: Workspace[ExistsT], path: str | None, ctx: ToolContext | None) -> str:
        """:meth:`resolve` ``path`` (default ``.``); raise ``Path not found: ...`` if it is not
        there, as ``ls`` and ``find`` do before anything else."""
        resolved = self.resolve(path or ".", ctx)
        if not await self.exists(resolved):
            raise ToolError(f"Path not found: {resolved}")
        return resolved

    async def exists(self: Workspace[ExistsT], resolved: str) -> bool:
        """Whether ``resolved`` is there; a path the backend refuses (outside the root, denied
        by policy) is a :class:`ToolError` saying so, as a read of it is, never "missing"."""
        try:
            return await self.ops.exists(resolved)
        except (EscapesRoot, PolicyDenied) as exc:
            raise ToolError(describe_error(exc, "stat", resolved)) from None
