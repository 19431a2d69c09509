"""Where a tool works: its operations, its working directory, and what ``~`` means there."""

from __future__ import annotations

import os
import posixpath
from typing import Any

from .._tool import ToolContext
from ._errors import ToolError
from ._paths import resolve_to_cwd

__all__ = ["LocalOperations", "Workspace"]


class LocalOperations:
    """The ``local:`` backend rooted at ``cwd``, connected on first use.

    Tools created without ``operations`` get one of these, so importing or creating a tool never
    starts a backend.
    """

    def __init__(self, root: str) -> None:
        self._url = "local:" + os.path.abspath(root)
        self._backend: Any = None

    async def aclose(self) -> None:
        """Close the backend if it was ever opened."""
        if self._backend is not None:
            backend, self._backend = self._backend, None
            await backend.aclose()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if self._backend is None:
            from .._connect import connect

            self._backend = connect(self._url)
        return getattr(self._backend, name)


class Workspace:
    """The operations a tool was created with and how it resolves paths.

    Args:
        cwd: the working directory, absolute in the backend's namespace (a relative one is taken
            from the backend's root).
        operations: the backend (or any object with the members the tool calls).
        home: what ``~`` expands to; by default the backend's root, since the agent's own home
            directory means nothing on a remote workspace.
    """

    def __init__(self, cwd: str, operations: Any | None, home: str | None) -> None:
        if operations is None:
            cwd = os.path.abspath(cwd)  # the default backend is this machine
        self.ops: Any = operations if operations is not None else LocalOperations(cwd)
        root = self._root()
        self.cwd = cwd if cwd.startswith("/") or root is None else posixpath.join(root, cwd)
        self._home = home

    def _root(self) -> str | None:
        if isinstance(self.ops, LocalOperations):
            return None
        root = getattr(self.ops, "root", None)
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

    async def existing(self, path: str | None, ctx: ToolContext | None) -> str:
        """:meth:`resolve` ``path`` (default ``.``); raise ``Path not found: ...`` if it is not
        there, as ``ls`` and ``find`` do before anything else."""
        resolved = self.resolve(path or ".", ctx)
        if not await self.ops.exists(resolved):
            raise ToolError(f"Path not found: {resolved}")
        return resolved
