"""Small fakes for the guard tests: a dict-backed backend and an audit sink that keeps events."""

from __future__ import annotations

import asyncio
import fnmatch
import posixpath
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Self

from operations import (
    AbortSignal,
    DirEntry,
    EscapesRoot,
    ExecResult,
    FileKind,
    FileStat,
    IsADirectory,
    NotFound,
    OnData,
    SearchMatch,
)

ROOT = "/ws"


class FakeBackend:
    """A backend over a dict of files, with a scripted shell, recording what reached it."""

    def __init__(self, files: Mapping[str, bytes] | None = None) -> None:
        self.files: dict[str, bytes] = dict(files or {})
        self.dirs: set[str] = {""}
        for name in self.files:
            parts = name.split("/")
            for end in range(1, len(parts)):
                self.dirs.add("/".join(parts[:end]))
        self.calls: list[str] = []
        self.exec_env: Mapping[str, str] | None = None
        self.exec_timeout: float | None = None
        self.closed = False

    @property
    def root(self) -> str:
        return ROOT

    @property
    def powershell(self) -> FakeBackend:
        return self

    def _rel(self, op: str, path: str) -> str:
        self.calls.append(op)
        full = posixpath.normpath(posixpath.join(ROOT, path))
        if full == ROOT:
            return ""
        if not full.startswith(ROOT + "/"):
            raise EscapesRoot(op, path)
        return full[len(ROOT) + 1 :]

    def _stat(self, op: str, path: str) -> FileStat:
        rel = self._rel(op, path)
        if rel in self.dirs:
            return FileStat(FileKind.DIRECTORY, 0, 0o755, 0.0)
        if rel in self.files:
            return FileStat(FileKind.FILE, len(self.files[rel]), 0o644, 0.0)
        raise NotFound(op, path)

    async def read_file(self, path: str) -> bytes:
        rel = self._rel("read_file", path)
        if rel in self.dirs:
            raise IsADirectory("read_file", path)
        if rel not in self.files:
            raise NotFound("read_file", path)
        return self.files[rel]

    async def access(self, path: str, *, writable: bool = False) -> None:
        self._stat("access", path)

    async def detect_image_mime_type(self, path: str) -> str | None:
        data = await self.read_file(path)
        return "image/png" if data.startswith(b"\x89PNG") else None

    async def write_file(self, path: str, content: bytes | str) -> None:
        rel = self._rel("write_file", path)
        self.files[rel] = content.encode() if isinstance(content, str) else content

    async def mkdir(self, path: str) -> None:
        self.dirs.add(self._rel("mkdir", path))

    async def exists(self, path: str) -> bool:
        rel = self._rel("exists", path)
        return rel in self.files or rel in self.dirs

    async def stat(self, path: str) -> FileStat:
        return self._stat("stat", path)

    async def lstat(self, path: str) -> FileStat:
        return self._stat("lstat", path)

    async def is_directory(self, path: str) -> bool:
        return self._stat("is_directory", path).is_directory

    def _children(self, rel: str) -> list[DirEntry]:
        prefix = rel + "/" if rel else ""
        out = [
            DirEntry(name[len(prefix) :], FileKind.FILE)
            for name in self.files
            if name.startswith(prefix) and "/" not in name[len(prefix) :]
        ]
        out += [
            DirEntry(name[len(prefix) :], FileKind.DIRECTORY)
            for name in self.dirs
            if name and name.startswith(prefix) and "/" not in name[len(prefix) :]
        ]
        return out

    async def readdir(self, path: str) -> list[str]:
        return [entry.name for entry in self._children(self._rel("readdir", path))]

    async def list_dir(self, path: str) -> list[DirEntry]:
        return self._children(self._rel("list_dir", path))

    async def glob(
        self, pattern: str, cwd: str, *, ignore: Sequence[str] = (), limit: int = 1000
    ) -> list[str]:
        base = self._rel("glob", cwd)
        prefix = base + "/" if base else ""
        names = [n[len(prefix) :] for n in self.files if n.startswith(prefix)]
        return sorted(n for n in names if fnmatch.fnmatch(n, pattern))[:limit]

    async def search(
        self,
        pattern: str,
        path: str,
        *,
        glob: str | None = None,
        ignore_case: bool = False,
        literal: bool = False,
        limit: int = 100,
    ) -> AsyncIterator[SearchMatch]:
        base = self._rel("search", path)
        for name, data in sorted(self.files.items()):
            if base and not name.startswith(base + "/") and name != base:
                continue
            for number, line in enumerate(data.decode(errors="replace").splitlines(), start=1):
                if pattern in line:
                    yield SearchMatch(f"{ROOT}/{name}", number, line)

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        rel = self._rel("remove", path)
        self.files = {
            k: v for k, v in self.files.items() if k != rel and not k.startswith(rel + "/")
        }
        self.dirs = {d for d in self.dirs if d != rel and not d.startswith(rel + "/")}

    async def rename(self, source: str, destination: str) -> None:
        src, dst = self._rel("rename", source), self._rel("rename", destination)
        self.files = {
            (dst + k[len(src) :] if k == src or k.startswith(src + "/") else k): v
            for k, v in self.files.items()
        }

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
        """``print:TEXT`` writes TEXT; ``flood`` writes 1 KiB chunks until aborted;
        ``exit:N`` exits with N."""
        self._rel("exec", cwd)
        self.exec_env, self.exec_timeout = env, timeout
        verb, _, arg = command.partition(":")
        if verb == "print":
            pending = on_data(arg.encode())
            if pending is not None:
                await pending
            return ExecResult(0)
        if verb == "flood":
            for _ in range(10_000):
                if signal is not None and signal.aborted:
                    return ExecResult(None, signal.kill_reason)
                pending = on_data(b"x" * 1024)
                if pending is not None:
                    await pending
                await asyncio.sleep(0)
            return ExecResult(0)
        return ExecResult(int(arg or 0))

    async def aclose(self) -> None:
        self.closed = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class ListAudit:
    """An audit sink that keeps events in a list; ``fail`` makes every write raise."""

    def __init__(self) -> None:
        self.events: list[dict[str, object]] = []
        self.fail = False
        self.healthy = True

    def record(self, event: Mapping[str, object]) -> None:
        if self.fail:
            self.healthy = False
            raise OSError(28, "No space left on device")
        self.healthy = True
        self.events.append(dict(event))
