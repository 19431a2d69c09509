"""The per-file mutation queue as ``write`` and ``edit`` use it (the runtime owns the queue)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from .._mutation_queue import with_file_mutation_queue
from ._workspace import Workspace

__all__ = ["in_mutation_queue"]

T = TypeVar("T")
OpsT = TypeVar("OpsT")


async def in_mutation_queue(ws: Workspace[OpsT], path: str, fn: Callable[[], Awaitable[T]]) -> T:
    """Run ``fn`` when every earlier mutation of ``path`` has settled.

    With the default ``local:`` backend the path is on this machine, so the key is its realpath
    (symlink aliases of one file share a queue); on any other backend the key is the path in
    that backend's namespace.
    """
    namespace = None if ws.is_default_local else ws.ops
    return await with_file_mutation_queue(path, fn, namespace=namespace)
