"""The per-file mutation queue as ``write`` and ``edit`` use it (the runtime owns the queue)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["in_mutation_queue"]

T = TypeVar("T")


async def in_mutation_queue(path: str, fn: Callable[[], Awaitable[T]]) -> T:
    """Run ``fn`` when every earlier mutation of ``path`` (a backend path) has settled."""
    from .._mutation_queue import with_file_mutation_queue

    return await with_file_mutation_queue(path, fn)
