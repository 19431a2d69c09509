"""Whole-file operations in chunks, so a front-end never holds a whole file.

The ``operations`` contract reads and writes whole files (``bytes``). A backend that can do better
(the broker core on disk, ``GuardedBackend`` around it, the gRPC client) also offers
:class:`ChunkedFileOperations`, an optional extension; front-ends then stream files through it with
bounded memory. For any other backend (the memory backend) these helpers fall back to the
whole-file calls, which is what that backend holds in memory anyway.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator
from typing import TYPE_CHECKING, Protocol, cast, runtime_checkable

from ._errors import TooLarge
from ._protocols import Backend

if TYPE_CHECKING:
    from ._gate import Gate, GatedBackend

__all__ = [
    "FALLBACK_WRITE_LIMIT",
    "ChunkedFileOperations",
    "read_chunks",
    "read_small",
    "write_chunks",
]

FALLBACK_WRITE_LIMIT = 256 * 1024 * 1024  # a backend without write_chunks buffers the whole file


@runtime_checkable
class ChunkedFileOperations(Protocol):
    """Streaming forms of ``read_file`` and ``write_file``, with the same checks and errors."""

    def read_chunks(self, path: str, *, chunk_size: int) -> AsyncIterator[bytes]:
        """The content of the regular file at ``path``, in pieces of at most ``chunk_size``.

        Raises what ``read_file`` raises, before the first piece.
        """
        ...

    async def write_chunks(
        self, path: str, chunks: AsyncIterable[bytes], *, mode: int | None = None
    ) -> None:
        """Create or replace ``path`` atomically with the concatenated ``chunks`` (and ``mode``,
        as ``write_file`` takes it).

        If ``chunks`` raises, or the call is cancelled, nothing is written and the error propagates.
        """
        ...


def _chunked(backend: object) -> bool:
    """Whether ``backend`` streams files (checked once per type: a protocol check is slow)."""
    kind = type(backend)
    known = _CHUNKED.get(kind)
    if known is None:
        known = _CHUNKED[kind] = isinstance(backend, ChunkedFileOperations)
    return known


_CHUNKED: dict[type, bool] = {}


def read_chunks(backend: Backend, path: str, chunk_size: int) -> AsyncGenerator[bytes, None]:
    """Stream ``path`` from ``backend``, in pieces of at most ``chunk_size`` bytes.

    A backend's own stream (an async generator: it can be closed early) is returned as it is,
    not relayed: each layer of a stack (front-end, guard, core) would otherwise add a generator
    step per piece.
    """
    if _chunked(backend):
        pieces = cast(ChunkedFileOperations, backend).read_chunks(path, chunk_size=chunk_size)
        if isinstance(pieces, AsyncGenerator):
            return pieces
        return _sliced(pieces, chunk_size)
    return _whole(backend, path, chunk_size)


async def _sliced(pieces: AsyncIterator[bytes], chunk_size: int) -> AsyncGenerator[bytes, None]:
    async for piece in pieces:
        for start in range(0, len(piece), chunk_size):
            yield piece[start : start + chunk_size]


async def _whole(backend: Backend, path: str, chunk_size: int) -> AsyncGenerator[bytes, None]:
    """A backend without streams: the whole file, then sliced (it holds it in memory anyway)."""
    data = await backend.read_file(path)
    view = memoryview(data)
    for start in range(0, len(data), chunk_size):
        yield bytes(view[start : start + chunk_size])


async def read_small(backend: Backend, path: str, limit: int) -> bytes | None:
    """The content of ``path`` if it holds at most ``limit`` bytes, else ``None``.

    For front-ends that answer a small read in one message and stream only larger files. A
    backend may offer ``read_small(path, limit)`` itself (``GuardedBackend`` does, so that only
    reads that return content are audited); errors are those of ``read_file``.
    """
    own = getattr(backend, "read_small", None)
    if own is not None:
        return cast(bytes | None, await own(path, limit))
    return await read_small_streamed(backend, path, limit)


async def read_small_streamed(
    backend: Backend, path: str, limit: int, *, gate: Gate | None = None
) -> bytes | None:
    """:func:`read_small` through ``backend``'s stream (for a backend whose own ``read_small``
    handles only some limits); with a ``gate``, ``backend`` is a :class:`GatedBackend`."""
    if gate is None:
        pieces = read_chunks(backend, path, limit + 1)
    else:
        gated = cast(GatedBackend, backend)
        pieces = cast(
            AsyncGenerator[bytes, None],
            gated.read_chunks(path, chunk_size=limit + 1, gate=gate),
        )
    try:
        first = await anext(pieces, b"")
        if len(first) > limit or await anext(pieces, None) is not None:
            return None
        return first
    finally:
        await pieces.aclose()


async def write_chunks(
    backend: Backend, path: str, chunks: AsyncIterable[bytes], *, mode: int | None = None
) -> None:
    """Write the concatenated ``chunks`` to ``path`` on ``backend``, atomically, with ``mode``
    (``None``: a replaced file keeps its own).

    Raises:
        TooLarge: the backend cannot stream and the content passes :data:`FALLBACK_WRITE_LIMIT`.
    """
    given = {} if mode is None else {"mode": mode}  # a backend of before `mode` still works
    if _chunked(backend):
        await cast(ChunkedFileOperations, backend).write_chunks(path, chunks, **given)
        return
    buffer = bytearray()
    async for piece in chunks:
        buffer += piece
        if len(buffer) > FALLBACK_WRITE_LIMIT:
            raise TooLarge(
                "write_file", path, f"content exceeds {FALLBACK_WRITE_LIMIT} bytes on this backend"
            )
    await backend.write_file(path, bytes(buffer), **given)
