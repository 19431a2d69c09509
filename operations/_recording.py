"""``RecordingBackend``: any backend, with every operation written to a cassette.

::

    async with RecordingBackend(connect("local:/srv/ws"), "session.cassette") as ops:
        ... run the agent's tools against ``ops`` ...
    replay = InMemoryOperations.from_cassette("session.cassette")

Before the first call the tree under the root is written (bounded by :data:`MAX_SNAPSHOT_ENTRIES`,
:data:`MAX_SNAPSHOT_BYTES` and :data:`MAX_SNAPSHOT_FILE_BYTES`: past them a file is written with
its size and ``omitted``). Each call is written once it has ended: its arguments and its result or
error; a command also with its output chunks and their timing, its exit code or kill reason, the
:class:`~operations._cassette.WrittenState` digest it ran with, and then what it changed in the
tree (found by walking the tree again, and reading only what changed), so a replay sees the same
files afterwards. The format is :mod:`operations._cassette`.

Secrets are never written: a file the ``deny_read`` globs name (or that the backend refuses to
read) is written with the rule and no content; what a read returns is written as its size and
SHA-256, not its bytes; a command's environment is written as names only; connection options
(tokens) are not the backend's to give, so they never reach the cassette.

Not recorded: processes that outlive a call (``processes`` is the inner backend's) and symbolic
links (the Operations interfaces cannot read a link's target), which the snapshot leaves out.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterable, AsyncIterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from ._abort import AbortSignal
from ._cassette import CassetteWriter, WrittenState, encode_bytes, error_to_json
from ._errors import OpsError, PolicyDenied
from ._gate import Gate
from ._policy import Policy, PolicyEnforcer
from ._processes import ProcessOperations
from ._protocols import Backend, PowerShellOperations
from ._types import DirEntry, ExecResult, FileKind, FileStat, OnData, SearchMatch

__all__ = [
    "MAX_SNAPSHOT_BYTES",
    "MAX_SNAPSHOT_ENTRIES",
    "MAX_SNAPSHOT_FILE_BYTES",
    "RecordingBackend",
]

MAX_SNAPSHOT_ENTRIES = 20_000
"""Entries the tree snapshot walks; a bigger workspace is cut there (and the cut is written)."""

MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024
"""File content the snapshot writes in all; later files are written as ``omitted``."""

MAX_SNAPSHOT_FILE_BYTES = 4 * 1024 * 1024
"""Largest single file whose content the snapshot writes (a cassette stays diffable)."""

_Meta = tuple[str, int, int, float]
"""What the walk keeps of an entry to tell a change: kind, mode, size, mtime."""


def _gated(gate: Gate | None) -> dict[str, Any]:
    return {} if gate is None else {"gate": gate}


def _stat_json(st: FileStat) -> dict[str, Any]:
    return {"kind": st.kind.value, "size": st.size, "mode": st.mode, "mtime": st.mtime}


def _digest(data: bytes) -> dict[str, Any]:
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


class RecordingBackend:
    """``inner`` with every call written to the cassette at ``path`` (created or replaced).

    Args:
        inner: the live backend (closed by :meth:`aclose`).
        path: the cassette file.
        deny_read: root-relative globs whose content is never written (the policy's
            ``deny_read``); the backend's own refusals are honoured as well.
        source: where the session was recorded, for the header (a URL without credentials).
        append: add to an existing cassette instead of starting one (no new snapshot).
        state: the written-state digest to carry on (a replay that appends new commands).
        close_inner: whether :meth:`aclose` closes ``inner`` (false when it is shared).
    """

    def __init__(
        self,
        inner: Backend,
        path: str | Path,
        *,
        deny_read: Sequence[str] = (),
        source: str | None = None,
        append: bool = False,
        state: WrittenState | None = None,
        close_inner: bool = True,
    ) -> None:
        self.inner = inner
        self._close_inner = close_inner
        self.path = Path(path)
        self._enforcer = PolicyEnforcer(Policy(deny_read=list(deny_read), deny_write=[]))
        header = {"root": inner.root, "source": source, "deny_read": list(deny_read)}
        self._writer = CassetteWriter(self.path, None if append else header)
        self._started = append
        self._start_lock = asyncio.Lock()
        self._tree: dict[str, _Meta] = {}
        self._stale = True
        self.state = state if state is not None else WrittenState()
        self.last_effects: list[dict[str, Any]] = []
        """What the last command changed in the tree (as written to the cassette)."""
        self._powershell = _RecordingPowerShell(self)
        if getattr(inner, "decides_on_resolved_paths", False):
            self.decides_on_resolved_paths: Literal[True] = True

    @property
    def root(self) -> str:
        return self.inner.root

    @property
    def powershell(self) -> PowerShellOperations:
        return self._powershell

    @property
    def processes(self) -> ProcessOperations:
        """The inner backend's processes, not recorded."""
        return self.inner.processes

    def capabilities(self) -> dict[str, object]:
        """The inner backend's facts (what a broker reports as its capabilities), if any."""
        describe = getattr(self.inner, "capabilities", None)
        return dict(describe()) if callable(describe) else {}

    # -- the tree -----------------------------------------------------------------------------

    def _rel(self, path: str) -> str:
        return path[len(self.root) :].lstrip("/")

    async def _walk(self) -> dict[str, tuple[_Meta, FileStat]]:
        """Every entry under the root (links not followed), at most the entry bound."""
        found: dict[str, tuple[_Meta, FileStat]] = {}
        pending = [""]
        while pending and len(found) < MAX_SNAPSHOT_ENTRIES:
            rel = pending.pop()
            full = f"{self.root}/{rel}" if rel else self.root
            try:
                entries = await self.inner.list_dir(full)
            except OpsError:
                continue  # unreadable or refused: nothing below it is written
            for entry in sorted(entries, key=lambda e: e.name, reverse=True):
                child = f"{rel}/{entry.name}" if rel else entry.name
                if entry.kind is FileKind.SYMLINK or len(found) >= MAX_SNAPSHOT_ENTRIES:
                    continue
                try:
                    st = await self.inner.lstat(f"{self.root}/{child}")
                except OpsError:
                    continue
                found[child] = ((st.kind.value, st.mode, st.size, st.mtime), st)
                if st.kind is FileKind.DIRECTORY:
                    pending.append(child)
        return found

    async def _tree_event(self, rel: str, st: FileStat, budget: list[int]) -> dict[str, Any]:
        if st.kind is FileKind.DIRECTORY:
            return {"t": "dir", "path": rel, "mode": st.mode}
        event: dict[str, Any] = {"t": "file", "path": rel, "mode": st.mode, "mtime": st.mtime}
        rule = self._denied(rel)
        if rule is None and st.size <= min(MAX_SNAPSHOT_FILE_BYTES, budget[0]):
            try:
                data = await self.inner.read_file(f"{self.root}/{rel}")
            except PolicyDenied as error:
                rule = error.rule or "denied by the backend"
            except OpsError as error:
                return {**event, "size": st.size, "omitted": error.code}
            else:
                budget[0] -= len(data)
                return {**event, **encode_bytes(data)}
        if rule is not None:
            return {**event, "size": st.size, "denied": rule}
        return {**event, "size": st.size, "omitted": "over the snapshot bounds"}

    def _denied(self, rel: str) -> str | None:
        try:
            self._enforcer.check_read("snapshot", rel)
        except PolicyDenied as error:
            return error.rule
        return None

    async def _start(self) -> None:
        async with self._start_lock:
            if self._started:
                return
            walked = await self._walk()
            budget = [MAX_SNAPSHOT_BYTES]
            for rel in sorted(walked):
                self._writer.write(await self._tree_event(rel, walked[rel][1], budget))
            self._tree = {rel: meta for rel, (meta, _) in walked.items()}
            self._stale = False
            self._started = True

    async def _refresh(self) -> None:
        """Know the tree as it is now, before a command runs (file operations changed it)."""
        if self._stale:
            self._tree = {rel: meta for rel, (meta, _) in (await self._walk()).items()}
            self._stale = False

    async def _effects(self) -> None:
        """Write what the command just run changed in the tree."""
        walked = await self._walk()
        changes: list[dict[str, Any]] = []
        budget = [MAX_SNAPSHOT_BYTES]
        for rel in sorted(walked):
            meta, st = walked[rel]
            if self._tree.get(rel) != meta:
                changes.append(await self._tree_event(rel, st, budget))
        changes.extend({"t": "gone", "path": rel} for rel in sorted(self._tree.keys() - walked))
        self._tree = {rel: meta for rel, (meta, _) in walked.items()}
        self.last_effects = changes
        if changes:
            self._writer.write({"t": "effect", "changes": changes})

    # -- calls --------------------------------------------------------------------------------

    async def _call(
        self, op: str, args: dict[str, Any], call: Any, encode: Any = None, *, mutates: bool = False
    ) -> Any:
        await self._start()
        try:
            result = await call
        except OpsError as error:
            self._writer.write({"t": "op", "op": op, "args": args, "error": error_to_json(error)})
            raise
        ok = result if encode is None else encode(result)
        self._writer.write({"t": "op", "op": op, "args": args, "ok": ok})
        if mutates:
            self._stale = True
        return result

    async def read_file(self, path: str, *, gate: Gate | None = None) -> bytes:
        data: bytes = await self._call(
            "read_file", {"path": path}, self.inner.read_file(path, **_gated(gate)), _digest
        )
        return data

    async def read_chunks(
        self, path: str, *, chunk_size: int, gate: Gate | None = None
    ) -> AsyncIterator[bytes]:
        """``read_file``, sliced (a recorded session is held in memory call by call)."""
        data = await self.read_file(path, gate=gate)
        for start in range(0, len(data), chunk_size):
            yield data[start : start + chunk_size]

    async def read_small(self, path: str, limit: int, *, gate: Gate | None = None) -> bytes | None:
        data = await self.read_file(path, gate=gate)
        return data if len(data) <= limit else None

    async def access(self, path: str, *, writable: bool = False, gate: Gate | None = None) -> None:
        call = self.inner.access(path, writable=writable, **_gated(gate))
        await self._call("access", {"path": path, "writable": writable}, call)

    async def detect_image_mime_type(self, path: str, *, gate: Gate | None = None) -> str | None:
        call = self.inner.detect_image_mime_type(path, **_gated(gate))
        mime: str | None = await self._call("detect_image_mime_type", {"path": path}, call)
        return mime

    async def write_file(
        self,
        path: str,
        content: bytes | str,
        *,
        mode: int | None = None,
        gate: Gate | None = None,
    ) -> None:
        data = content.encode() if isinstance(content, str) else content
        given = {} if mode is None else {"mode": mode}
        call = self.inner.write_file(path, data, **given, **_gated(gate))
        args = {"path": path, "content": _digest(data), **given}
        await self._call("write_file", args, call, mutates=True)
        self.state.wrote(path, data)

    async def write_chunks(
        self,
        path: str,
        chunks: AsyncIterable[bytes],
        *,
        mode: int | None = None,
        gate: Gate | None = None,
    ) -> None:
        buffer = bytearray()
        async for piece in chunks:
            buffer += piece
        await self.write_file(path, bytes(buffer), mode=mode, gate=gate)

    async def mkdir(self, path: str, *, gate: Gate | None = None) -> None:
        await self._call(
            "mkdir", {"path": path}, self.inner.mkdir(path, **_gated(gate)), mutates=True
        )
        self.state.made_dir(path)

    async def exists(self, path: str, *, gate: Gate | None = None) -> bool:
        found: bool = await self._call(
            "exists", {"path": path}, self.inner.exists(path, **_gated(gate))
        )
        return found

    async def stat(self, path: str, *, gate: Gate | None = None) -> FileStat:
        st: FileStat = await self._call(
            "stat", {"path": path}, self.inner.stat(path, **_gated(gate)), _stat_json
        )
        return st

    async def lstat(self, path: str, *, gate: Gate | None = None) -> FileStat:
        st: FileStat = await self._call(
            "lstat", {"path": path}, self.inner.lstat(path, **_gated(gate)), _stat_json
        )
        return st

    async def is_directory(self, path: str, *, gate: Gate | None = None) -> bool:
        call = self.inner.is_directory(path, **_gated(gate))
        found: bool = await self._call("is_directory", {"path": path}, call)
        return found

    async def readdir(self, path: str, *, gate: Gate | None = None) -> list[str]:
        names: list[str] = await self._call(
            "readdir", {"path": path}, self.inner.readdir(path, **_gated(gate)), sorted
        )
        return names

    async def list_dir(self, path: str, *, gate: Gate | None = None) -> list[DirEntry]:
        entries: list[DirEntry] = await self._call(
            "list_dir",
            {"path": path},
            self.inner.list_dir(path, **_gated(gate)),
            lambda found: sorted([e.name, e.kind.value] for e in found),
        )
        return entries

    async def glob(
        self,
        pattern: str,
        cwd: str,
        *,
        ignore: Sequence[str] = (),
        limit: int = 1000,
        gate: Gate | None = None,
    ) -> list[str]:
        args = {"pattern": pattern, "cwd": cwd, "ignore": list(ignore), "limit": limit}
        call = self.inner.glob(pattern, cwd, ignore=ignore, limit=limit, **_gated(gate))
        found: list[str] = await self._call("glob", args, call)
        return found

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
        args = {
            "pattern": pattern,
            "path": path,
            "glob": glob,
            "ignore_case": ignore_case,
            "literal": literal,
            "limit": limit,
        }

        async def collect() -> list[SearchMatch]:
            found = self.inner.search(
                pattern,
                path,
                glob=glob,
                ignore_case=ignore_case,
                literal=literal,
                limit=limit,
                **_gated(gate),
            )
            return [match async for match in found]

        matches: list[SearchMatch] = await self._call(
            "search",
            args,
            collect(),
            lambda found: [[m.path, m.line_number, m.line_text] for m in found],
        )
        for match in matches:
            yield match

    async def remove(self, path: str, *, recursive: bool = False, gate: Gate | None = None) -> None:
        call = self.inner.remove(path, recursive=recursive, **_gated(gate))
        await self._call("remove", {"path": path, "recursive": recursive}, call, mutates=True)
        self.state.removed(path)

    async def rename(self, source: str, destination: str, *, gate: Gate | None = None) -> None:
        call = self.inner.rename(source, destination, **_gated(gate))
        args = {"source": source, "destination": destination}
        await self._call("rename", args, call, mutates=True)
        self.state.renamed(source, destination)

    # -- commands -----------------------------------------------------------------------------

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
        return await self._exec("bash", command, cwd, on_data, signal, timeout, env, gate)

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
        return await self._exec("powershell", command, cwd, on_data, signal, timeout, env, gate)

    async def _exec(
        self,
        shell: str,
        command: str,
        cwd: str,
        on_data: OnData,
        signal: AbortSignal | None,
        timeout: float | None,
        env: Mapping[str, str] | None,
        gate: Gate | None,
    ) -> ExecResult:
        await self._start()
        await self._refresh()
        event: dict[str, Any] = {
            "t": "exec",
            "shell": shell,
            "command": command,
            "cwd": cwd,
            "timeout": timeout,
            "env": sorted(env or {}),
            "state": self.state.digest(),
        }
        chunks: list[list[Any]] = []
        last = time.monotonic()

        async def record(data: bytes) -> None:
            nonlocal last
            now = time.monotonic()
            text = encode_bytes(data)
            chunks.append([round(now - last, 6), text.get("text", text)])
            last = now
            result = on_data(data)
            if result is not None:
                await result

        options: dict[str, Any] = {"signal": signal, "timeout": timeout, "env": env, **_gated(gate)}
        try:
            if shell == "bash":
                result = await self.inner.exec(command, cwd, on_data=record, **options)
            elif gate is not None:
                result = await self.inner.exec_powershell(  # type: ignore[attr-defined]
                    command, cwd, on_data=record, **options
                )
            else:
                result = await self.inner.powershell.exec(command, cwd, on_data=record, **options)
        except OpsError as error:
            self._writer.write({**event, "chunks": chunks, "error": error_to_json(error)})
            raise
        except asyncio.CancelledError:
            tail = round(time.monotonic() - last, 6)
            self._writer.write({**event, "chunks": chunks, "kill": "aborted", "tail": tail})
            raise
        if result.kill_reason is not None:
            tail = round(time.monotonic() - last, 6)
            ending: dict[str, Any] = {"kill": result.kill_reason.value, "tail": tail}
        else:
            ending = {"exit": result.exit_code}
        self._writer.write({**event, "chunks": chunks, **ending})
        await self._effects()
        return result

    # -- lifecycle ----------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the inner backend (unless shared), then the cassette. Idempotent."""
        try:
            if self._close_inner:
                await self.inner.aclose()
        finally:
            self._writer.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class _RecordingPowerShell:
    """``backend.powershell`` of a recording: recorded as ``shell: powershell``."""

    def __init__(self, backend: RecordingBackend) -> None:
        self._backend = backend

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
        return await self._backend._exec(
            "powershell", command, cwd, on_data, signal, timeout, env, None
        )
