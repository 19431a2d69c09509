"""Per-file mutation queue: read-modify-write windows on one file never interleave.

``await with_file_mutation_queue(path, fn)`` runs ``fn()`` once every earlier call for the same
file has finished: FIFO per file in call order, concurrent across files, the slot released even
when ``fn`` raises (its result or exception reaches the caller unchanged, and successors run).
A caller cancelled while waiting gives up its turn without letting a successor overtake the call
still running ahead of it.

**Keys** (reference 1.3). On the local filesystem the key is the absolute path with symlinks
resolved, so aliases of an *existing* file share a queue; a path that does not exist (or whose
parent is not a directory) keys on its absolute, unresolved form; any other resolution failure
(a symlink loop, a permission error) is raised and ``fn`` does not run. On a remote backend the
file lives in the backend's namespace, not ours: pass ``namespace=`` (e.g. the backend object) and
the key is ``(namespace, normalised path)``, optionally canonicalised by an async ``resolve``.

State is per event loop.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import weakref
from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

__all__ = ["mutation_queue_key", "with_file_mutation_queue"]

T = TypeVar("T")


class _LoopState:
    """The tails of every per-key chain, and the registration lock that keeps call order."""

    def __init__(self) -> None:
        self.tails: dict[Hashable, asyncio.Future[None]] = {}
        self.registration = asyncio.Lock()


_STATES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
    weakref.WeakKeyDictionary()
)


def _state() -> _LoopState:
    loop = asyncio.get_running_loop()
    state = _STATES.get(loop)
    if state is None:
        state = _STATES[loop] = _LoopState()
    return state


def mutation_queue_key(path: str) -> str:
    """The local key for ``path``: realpath of the absolute path, or the absolute path when the
    file (or a parent directory) does not exist. Other ``OSError``s propagate."""
    absolute = os.path.abspath(path)
    try:
        return os.path.realpath(absolute, strict=True)
    except (FileNotFoundError, NotADirectoryError):
        return absolute


async def _key(
    path: str,
    namespace: object,
    resolve: Callable[[str], Awaitable[str]] | None,
) -> Hashable:
    if namespace is None and resolve is None:
        return mutation_queue_key(path)
    normalised = posixpath.normpath(path)
    if resolve is not None:
        normalised = await resolve(normalised)
    try:
        hash(namespace)
    except TypeError:
        return (id(namespace), normalised)  # an unhashable backend object: its identity
    return (namespace, normalised)


async def with_file_mutation_queue(
    path: str,
    fn: Callable[[], Awaitable[T]],
    *,
    namespace: object = None,
    resolve: Callable[[str], Awaitable[str]] | None = None,
) -> T:
    """Run ``fn()`` exclusively for the file ``path`` (see the module docstring for keys).

    ``namespace`` names the filesystem ``path`` lives in (``None``: this machine's), e.g. the
    backend object or its URL (equal hashable namespaces share queues); ``resolve``
    canonicalises a remote path (it may raise "not found"; pass a function that returns its
    input in that case, as the local key does).
    """
    state = _state()
    async with state.registration:
        key = await _key(path, namespace, resolve)
        previous = state.tails.get(key)
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        state.tails[key] = mine

    def release() -> None:
        if not mine.done():
            mine.set_result(None)
        if state.tails.get(key) is mine:
            del state.tails[key]

    if previous is not None and not previous.done():
        try:
            await asyncio.shield(previous)
        except asyncio.CancelledError:
            # Keep the chain intact: our successor waits for our predecessor, not for us.
            previous.add_done_callback(lambda _: release())
            raise
    try:
        return await fn()
    finally:
        release()
