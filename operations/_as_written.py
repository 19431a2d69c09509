"""``AsWritten``: the gate asked about the path as written, for a backend that cannot tell what it
opened.

The broker core and the memory backend decide on the path they resolved
(:class:`~operations.GatedBackend`). A remote client cannot: its broker resolves the path on the
other side and applies its own policy there. A :class:`~operations.GuardedBackend` around such a
client (a client-side policy, or a test fake) therefore asks the gate about the path as the caller
wrote it, normalised and made relative to the root. That is a decision on a string, not on a file,
and this module is the only place it is made.
"""

from __future__ import annotations

import posixpath
from collections.abc import AsyncIterable, AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Literal, Self

from ._abort import AbortSignal
from ._chunked import read_chunks, read_small, write_chunks
from ._errors import OpsError, Unavailable
from ._gate import MAX_TREE_CHECK, Gate
from ._processes import (
    GatedProcessOperations,
    ProcessInfo,
    ProcessOperations,
    ProcessOutput,
    PtySize,
)
from ._protocols import Backend, PowerShellOperations
from ._types import DirEntry, ExecResult, FileKind, FileStat, OnData, SearchMatch

__all__ = ["AsWritten", "relative"]


def relative(root: str, path: str) -> str | None:
    """``path`` relative to ``root``, normalised; ``None`` if it lies outside the root."""
    root = posixpath.normpath(root)
    full = posixpath.normpath(posixpath.join(root, path))
    if full == root:
        return ""
    prefix = root if root.endswith("/") else root + "/"
    return full[len(prefix) :] if full.startswith(prefix) else None


class AsWritten:
    """``inner`` as a :class:`~operations.GatedBackend` that decides on paths as written.

    A path outside the root is not asked about: ``inner`` refuses it (``EscapesRoot``).
    """

    decides_on_resolved_paths: Literal[True] = True

    def __init__(self, inner: Backend) -> None:
        self.inner = inner

    @property
    def root(self) -> str:
        return self.inner.root

    @property
    def powershell(self) -> PowerShellOperations:
        return self.inner.powershell

    @property
    def processes(self) -> GatedProcessOperations:
        """The inner backend's processes (its broker knows the caller; ``owner`` is not sent),
        with ``start``'s cwd asked about as written."""
        return _WrittenProcesses(self)

    def _rel(self, path: str) -> str | None:
        return relative(self.inner.root, path)

    def _read(self, gate: Gate | None, path: str) -> None:
        rel = self._rel(path)
        if gate is not None and rel is not None:
            gate.read(rel)

    def _write(self, gate: Gate | None, path: str) -> None:
        rel = self._rel(path)
        if gate is not None and rel is not None:
            gate.write(rel)

    def _seen(self, gate: Gate | None, path: str) -> None:
        rel = self._rel(path)
        if gate is not None and rel is not None:
            gate.seen(rel)

    # -- reading -------------------------------------------------------------------------------

    async def read_file(self, path: str, *, gate: Gate | None = None) -> bytes:
        self._read(gate, path)
        return await self.inner.read_file(path)

    def read_chunks(
        self, path: str, *, chunk_size: int, gate: Gate | None = None
    ) -> AsyncIterator[bytes]:
        self._read(gate, path)
        return read_chunks(self.inner, path, chunk_size)

    async def read_small(self, path: str, limit: int, *, gate: Gate | None = None) -> bytes | None:
        self._read(gate, path)
        return await read_small(self.inner, path, limit)

    async def access(self, path: str, *, writable: bool = False, gate: Gate | None = None) -> None:
        self._read(gate, path)
        if writable:
            self._write(gate, path)
        await self.inner.access(path, writable=writable)

    async def detect_image_mime_type(self, path: str, *, gate: Gate | None = None) -> str | None:
        self._read(gate, path)
        return await self.inner.detect_image_mime_type(path)

    async def exists(self, path: str, *, gate: Gate | None = None) -> bool:
        self._seen(gate, path)
        return await self.inner.exists(path)

    async def is_directory(self, path: str, *, gate: Gate | None = None) -> bool:
        self._seen(gate, path)
        return await self.inner.is_directory(path)

    async def stat(self, path: str, *, gate: Gate | None = None) -> FileStat:
        self._seen(gate, path)
        return await self.inner.stat(path)

    async def lstat(self, path: str, *, gate: Gate | None = None) -> FileStat:
        self._seen(gate, path)
        return await self.inner.lstat(path)

    async def readdir(self, path: str, *, gate: Gate | None = None) -> list[str]:
        self._read(gate, path)
        return await self.inner.readdir(path)

    async def list_dir(self, path: str, *, gate: Gate | None = None) -> list[DirEntry]:
        self._read(gate, path)
        return await self.inner.list_dir(path)

    async def glob(
        self,
        pattern: str,
        cwd: str,
        *,
        ignore: Sequence[str] = (),
        limit: int = 1000,
        gate: Gate | None = None,
    ) -> list[str]:
        self._read(gate, cwd)
        found = await self.inner.glob(pattern, cwd, ignore=ignore, limit=limit)
        base = self._rel(cwd)
        if gate is None or base is None:
            return found
        return [name for name in found if not gate.hidden(posixpath.join(base, name).lstrip("/"))]

    async def search(
        self,
        pattern: str,
        path: str,
        *,
        glob: str | None = None,
        ignore_case: bool = False,
        literal: bool = False,
        limit: int = 100,
        gate: Gate | None = None,
    ) -> AsyncIterator[SearchMatch]:
        self._read(gate, path)
        matches = self.inner.search(
            pattern, path, glob=glob, ignore_case=ignore_case, literal=literal, limit=limit
        )
        try:
            async for match in matches:
                rel = self._rel(match.path)
                if gate is not None and rel is not None and gate.hidden(rel):
                    continue  # never a read-denied file's lines
                yield match
        finally:
            aclose = getattr(matches, "aclose", None)
            if aclose is not None:
                await aclose()

    # -- writing -------------------------------------------------------------------------------

    async def write_file(
        self,
        path: str,
        content: bytes | str,
        *,
        mode: int | None = None,
        gate: Gate | None = None,
    ) -> None:
        self._write(gate, path)
        if mode is None:
            await self.inner.write_file(path, content)
        else:
            await self.inner.write_file(path, content, mode=mode)

    async def write_chunks(
        self,
        path: str,
        chunks: AsyncIterable[bytes],
        *,
        mode: int | None = None,
        gate: Gate | None = None,
    ) -> None:
        self._write(gate, path)
        await write_chunks(self.inner, path, chunks, mode=mode)

    async def mkdir(self, path: str, *, gate: Gate | None = None) -> None:
        self._write(gate, path)
        await self.inner.mkdir(path)

    async def remove(self, path: str, *, recursive: bool = False, gate: Gate | None = None) -> None:
        self._write(gate, path)
        if recursive and gate is not None:
            async for child in self._tree(path, gate):
                self._write(gate, child)
        await self.inner.remove(path, recursive=recursive)

    async def rename(self, source: str, destination: str, *, gate: Gate | None = None) -> None:
        if gate is not None:
            self._move(gate, source, destination)
            try:
                is_dir = (await self.inner.lstat(source)).kind is FileKind.DIRECTORY
            except OpsError:
                is_dir = False  # the rename itself reports what is wrong with the source
            if is_dir:
                async for child in self._tree(source, gate):
                    moved = posixpath.join(destination, posixpath.relpath(child, source))
                    self._move(gate, child, moved)
        await self.inner.rename(source, destination)

    def _move(self, gate: Gate, source: str, destination: str) -> None:
        src, dst = self._rel(source), self._rel(destination)
        if src is not None and dst is not None:
            gate.move(src, dst, shown=source)
        else:  # one end outside the root: inner refuses it; the other end is still checked
            self._write(gate, source)
            self._write(gate, destination)

    async def _tree(self, path: str, gate: Gate) -> AsyncIterator[str]:
        """Every entry below directory ``path``, listed through ``inner``."""
        pending = [path]
        seen = 0
        while pending:
            directory = pending.pop()
            try:
                entries = await self.inner.list_dir(directory)
            except OpsError:
                continue  # not a directory, or gone: the operation itself reports it
            for item in entries:
                seen += 1
                if seen > MAX_TREE_CHECK:
                    raise gate.tree_too_large()
                child = posixpath.join(directory, item.name)
                yield child
                if item.kind is FileKind.DIRECTORY:
                    pending.append(child)

    # -- commands ------------------------------------------------------------------------------

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
    ) -> ExecResult:
        self._read(gate, cwd)
        return await self.inner.exec(
            command, cwd, on_data=on_data, signal=signal, timeout=timeout, env=env
        )

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
    ) -> ExecResult:
        self._read(gate, cwd)
        return await self.inner.powershell.exec(
            command, cwd, on_data=on_data, signal=signal, timeout=timeout, env=env
        )

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class _WrittenProcesses:
    """:class:`~operations.GatedProcessOperations` over a backend that owns its processes itself."""

    def __init__(self, backend: AsWritten) -> None:
        self._backend = backend

    def _inner(self, op: str) -> ProcessOperations:
        processes = getattr(self._backend.inner, "processes", None)
        if not isinstance(processes, ProcessOperations):
            raise Unavailable(op, None, "this backend does not keep processes that outlive a call")
        return processes

    async def start(
        self,
        command: str,
        cwd: str,
        *,
        env: Mapping[str, str] | None = None,
        pty: PtySize | None = None,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        backpressure: bool = False,
        owner: str | None = None,
        gate: Gate | None = None,
    ) -> ProcessInfo:
        self._backend._read(gate, cwd)
        return await self._inner("start_process").start(
            command,
            cwd,
            env=env,
            pty=pty,
            timeout=timeout,
            idle_timeout=idle_timeout,
            backpressure=backpressure,
        )

    def attach(
        self, id: str, *, from_offset: int = 0, owner: str | None = None
    ) -> AsyncIterator[ProcessOutput]:
        return self._inner("attach_process").attach(id, from_offset=from_offset)

    async def write_stdin(self, id: str, data: bytes, *, owner: str | None = None) -> None:
        await self._inner("write_stdin").write_stdin(id, data)

    async def close_stdin(self, id: str, *, owner: str | None = None) -> None:
        await self._inner("close_stdin").close_stdin(id)

    async def signal(self, id: str, signal: int, *, owner: str | None = None) -> None:
        await self._inner("signal_process").signal(id, signal)

    async def resize(self, id: str, cols: int, rows: int, *, owner: str | None = None) -> None:
        await self._inner("resize_process").resize(id, cols, rows)

    async def list_processes(self, *, owner: str | None = None) -> list[ProcessInfo]:
        return await self._inner("list_processes").list_processes()

    async def wait(self, id: str, *, owner: str | None = None) -> ProcessInfo:
        return await self._inner("wait_process").wait(id)

    async def kill(self, id: str, *, owner: str | None = None) -> ProcessInfo:
        return await self._inner("kill_process").kill(id)
