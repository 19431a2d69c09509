"""SFTP over the backend's confined file operations, never over the local filesystem directly.

asyncssh's own ``chroot`` maps paths lexically and follows symlinks that already point out of the
root; this server instead hands every path to the :class:`operations.Backend`, whose resolver
refuses ``..``, absolute paths and symlinks that lead outside. The SFTP namespace is the
backend's: the initial directory is ``backend.root``, relative paths are taken from there.

Files never sit whole in memory (:mod:`._sftpfile`): a download streams from ``read_chunks``
through a small window (a read behind it reads the file again from its start); an upload is
spooled to an anonymous temp file in the broker's temp directory at any offset and streamed into
``write_chunks`` on close, so the replace stays atomic and the backend's limits (the policy's
``max_write_bytes``) apply as it streams; the policy decides an upload there too, on the file it
opens, so a refused put fails at CLOSE and is audited on its own path. An upload whose session ends without CLOSE is dropped,
never committed. A spool never takes its disk below a reserve of free space (:mod:`._spool`),
and a read waits until the channel has sent earlier replies.

Supported: open/read/write/close, stat, lstat, fstat, listing a directory, mkdir, remove, rmdir,
rename, posix-rename, realpath. Everything else (links, setstat, statvfs, locks, ...) is refused,
and the base class's local filesystem fallback (``map_path``) refuses too, so a method added by a
later asyncssh fails closed.
"""

from __future__ import annotations

import posixpath
import stat as st
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final, NoReturn

import asyncssh
from asyncssh import SFTPAttrs, SFTPName

from operations import (
    AlreadyExists,
    Backend,
    EscapesRoot,
    FileKind,
    FileStat,
    IsADirectory,
    NotADirectory,
    NotFound,
    OpsError,
    PermissionDenied,
    PolicyDenied,
)

from ._sftpfile import SFTPFile
from ._spool import Spool, spool_directory

__all__ = ["MAX_OPEN_FILES", "BackendSFTPServer"]

MAX_OPEN_FILES: Final = 64
"""Files one SFTP session may hold open at once: each holds a backend stream and up to a few
MiB of window (``_sftpfile.READ_WINDOW_BYTES``), so this bounds a session's memory and fds."""

_TYPE_BITS: Final = {
    FileKind.FILE: (st.S_IFREG, asyncssh.FILEXFER_TYPE_REGULAR),
    FileKind.DIRECTORY: (st.S_IFDIR, asyncssh.FILEXFER_TYPE_DIRECTORY),
    FileKind.SYMLINK: (st.S_IFLNK, asyncssh.FILEXFER_TYPE_SYMLINK),
    FileKind.OTHER: (0, asyncssh.FILEXFER_TYPE_SPECIAL),
}


def _attrs(stat: FileStat) -> SFTPAttrs:
    mode_bits, sftp_type = _TYPE_BITS[stat.kind]
    return SFTPAttrs(
        type=sftp_type,
        size=stat.size,
        permissions=mode_bits | (stat.mode & 0o7777),
        atime=int(stat.mtime),
        mtime=int(stat.mtime),
    )


def _sftp_error(exc: OpsError) -> asyncssh.SFTPError:
    """The SFTP status for an Operations failure (the message is the error's own text)."""
    reason = str(exc)
    if isinstance(exc, NotFound):
        return asyncssh.SFTPNoSuchFile(reason)
    if isinstance(exc, (PermissionDenied, PolicyDenied, EscapesRoot)):
        return asyncssh.SFTPPermissionDenied(reason)
    if isinstance(exc, AlreadyExists):
        return asyncssh.SFTPFileAlreadyExists(reason)
    if isinstance(exc, IsADirectory):
        return asyncssh.SFTPFileIsADirectory(reason)
    if isinstance(exc, NotADirectory):
        return asyncssh.SFTPNotADirectory(reason)
    return asyncssh.SFTPFailure(reason)


def _closed_by_session_end() -> bool:
    """Whether asyncssh calls ``close`` while cleaning up an ended session (files the client
    never closed), rather than for the client's CLOSE request.

    asyncssh closes every open file when the session ends; writing those back would commit a
    truncated upload as if it were complete. asyncssh exposes no flag for this, so look at the
    caller: its session ``_cleanup`` (asyncssh 2.x). If that ever changes, uploads that end
    without CLOSE are committed as before, never the reverse.
    """
    caller = sys._getframe(2)
    return caller.f_code.co_name == "_cleanup"


def _refuse(what: str) -> NoReturn:
    raise asyncssh.SFTPOpUnsupported(f"{what} is not supported by the opsbroker SFTP server")


class BackendSFTPServer(asyncssh.SFTPServer):
    """An SFTP server whose every file operation goes through ``backend``.

    ``drain``, if given, returns once the channel's send buffer is below its high-water mark:
    asyncssh sends replies without waiting, so a read waits for it before producing its data
    (otherwise a client with many large reads in flight piles the file up in the buffer).
    """

    def __init__(
        self,
        chan: asyncssh.SSHServerChannel[bytes],
        backend: Backend,
        *,
        drain: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        super().__init__(chan)
        self._backend = backend
        self._drain = drain
        self._root = backend.root
        self._spool_dir: str | None = None
        self._open_files = 0

    # -- paths --

    def _path(self, path: bytes) -> str:
        """A client path in the backend's namespace (relative paths start at the root)."""
        text = path.decode("utf-8", "surrogateescape")
        return text if text.startswith("/") else posixpath.join(self._root, text)

    def map_path(self, path: bytes) -> bytes:
        """Refused: nothing here may reach the local filesystem by a mapped path."""
        raise asyncssh.SFTPPermissionDenied("local paths are not served")

    async def realpath(self, path: bytes) -> bytes:
        full = posixpath.normpath(self._path(path) if path else self._root)
        if full != self._root and not full.startswith(self._root.rstrip("/") + "/"):
            raise asyncssh.SFTPPermissionDenied(
                f"realpath {path.decode(errors='replace')!r}: path escapes the workspace root"
            )
        return full.encode("utf-8", "surrogateescape")

    # -- files --

    async def open(self, path: bytes, pflags: int, attrs: SFTPAttrs) -> SFTPFile:
        name = self._path(path)
        if self._open_files >= MAX_OPEN_FILES:
            raise asyncssh.SFTPFailure(
                f"open {name!r}: {MAX_OPEN_FILES} files are already open in this SFTP session; "
                "close one first"
            )
        opened = await self._open(name, pflags)
        self._open_files += 1
        return opened

    async def _open(self, name: str, pflags: int) -> SFTPFile:
        writable = bool(pflags & asyncssh.FXF_WRITE)
        try:
            exists = await self._backend.exists(name)
            if writable and pflags & asyncssh.FXF_CREAT and pflags & asyncssh.FXF_EXCL and exists:
                raise AlreadyExists("open", name)
            if writable and (pflags & asyncssh.FXF_TRUNC or not exists):
                if not exists and not pflags & asyncssh.FXF_CREAT:
                    raise NotFound("open", name)
                # Decided (and audited, on this file) by ``write_chunks`` at CLOSE, on what it
                # opens: a check of the parent here was a second decision, logged on the parent.
                return SFTPFile.upload(self._backend, name, self._spool(name))
            if writable:
                await self._backend.access(name, writable=True)
            return await SFTPFile.download(
                self._backend, name, self._spool(name), writable=writable
            )
        except OpsError as exc:
            raise _sftp_error(exc) from None

    async def read(self, file_obj: object, offset: int, size: int) -> bytes:
        assert isinstance(file_obj, SFTPFile)
        if self._drain is not None:
            await self._drain()
        try:
            return await file_obj.read(offset, size)
        except OpsError as exc:
            raise _sftp_error(exc) from None

    async def write(self, file_obj: object, offset: int, data: bytes) -> int:
        assert isinstance(file_obj, SFTPFile)
        if not file_obj.writable:
            raise asyncssh.SFTPPermissionDenied("file not open for writing")
        try:
            file_obj.write(offset, data)
        except OpsError as exc:
            raise _sftp_error(exc) from None
        return len(data)

    async def close(self, file_obj: object) -> None:
        assert isinstance(file_obj, SFTPFile)
        ended = _closed_by_session_end()
        self._open_files -= 1
        if ended:
            await file_obj.discard()  # the client went away without closing: dropped
            return
        try:
            await file_obj.close()
        except OpsError as exc:
            raise _sftp_error(exc) from None

    async def fstat(self, file_obj: object) -> SFTPAttrs:
        assert isinstance(file_obj, SFTPFile)
        size = file_obj.size
        if size is None:  # a download not streamed to its end yet
            try:
                size = (await self._backend.stat(file_obj.path)).size
            except OpsError as exc:
                raise _sftp_error(exc) from None
        return SFTPAttrs(
            type=asyncssh.FILEXFER_TYPE_REGULAR,
            size=size,
            permissions=st.S_IFREG | 0o644,
        )

    def _spool(self, name: str) -> Spool:
        """A spool for the file ``name`` in the broker's temp directory (found once)."""
        if self._spool_dir is None:
            self._spool_dir = spool_directory(self._root)
        return Spool(self._spool_dir, "sftp", name)

    # -- metadata and directories --

    async def stat(self, path: bytes) -> SFTPAttrs:
        try:
            return _attrs(await self._backend.stat(self._path(path)))
        except OpsError as exc:
            raise _sftp_error(exc) from None

    async def lstat(self, path: bytes) -> SFTPAttrs:
        try:
            return _attrs(await self._backend.lstat(self._path(path)))
        except OpsError as exc:
            raise _sftp_error(exc) from None

    async def scandir(self, path: bytes) -> AsyncIterator[SFTPName]:
        name = self._path(path)
        try:
            entries = await self._backend.list_dir(name)
            yield SFTPName(b".", attrs=_attrs(await self._backend.stat(name)))
            for entry in entries:
                child = posixpath.join(name, entry.name)
                try:
                    attrs = _attrs(await self._backend.lstat(child))
                except NotFound:
                    continue  # removed meanwhile
                yield SFTPName(entry.name.encode("utf-8", "surrogateescape"), attrs=attrs)
        except OpsError as exc:
            raise _sftp_error(exc) from None

    async def mkdir(self, path: bytes, attrs: SFTPAttrs) -> None:
        name = self._path(path)
        try:
            if await self._lexists(name):
                raise AlreadyExists("mkdir", name)
            if not await self._backend.is_directory(posixpath.dirname(name) or "/"):
                raise NotADirectory("mkdir", posixpath.dirname(name))
            await self._backend.mkdir(name)
        except OpsError as exc:
            raise _sftp_error(exc) from None

    async def remove(self, path: bytes) -> None:
        name = self._path(path)
        try:
            if (await self._backend.lstat(name)).is_directory:
                raise IsADirectory("remove", name, "is a directory (use rmdir)")
            await self._backend.remove(name)
        except OpsError as exc:
            raise _sftp_error(exc) from None

    async def rmdir(self, path: bytes) -> None:
        name = self._path(path)
        try:
            if not (await self._backend.lstat(name)).is_directory:
                raise NotADirectory("rmdir", name)
            await self._backend.remove(name)
        except OpsError as exc:
            raise _sftp_error(exc) from None

    async def rename(self, oldpath: bytes, newpath: bytes) -> None:
        source, destination = self._path(oldpath), self._path(newpath)
        try:
            if await self._lexists(destination):
                raise AlreadyExists("rename", destination)
            await self._backend.rename(source, destination)
        except OpsError as exc:
            raise _sftp_error(exc) from None

    async def posix_rename(self, oldpath: bytes, newpath: bytes) -> None:
        try:
            await self._backend.rename(self._path(oldpath), self._path(newpath))
        except OpsError as exc:
            raise _sftp_error(exc) from None

    async def _lexists(self, name: str) -> bool:
        try:
            await self._backend.lstat(name)
        except NotFound:
            return False
        return True

    # -- refused --

    def open56(self, *args: object) -> NoReturn:
        _refuse("SFTPv5+ open")

    def setstat(self, path: bytes, attrs: SFTPAttrs) -> NoReturn:
        _refuse("setstat")

    def lsetstat(self, path: bytes, attrs: SFTPAttrs) -> NoReturn:
        _refuse("lsetstat")

    def fsetstat(self, file_obj: object, attrs: SFTPAttrs) -> NoReturn:
        _refuse("fsetstat")

    def readlink(self, path: bytes) -> NoReturn:
        _refuse("readlink")

    def symlink(self, oldpath: bytes, newpath: bytes) -> NoReturn:
        _refuse("symlink")

    def link(self, oldpath: bytes, newpath: bytes) -> NoReturn:
        _refuse("link")

    def lock(self, file_obj: object, offset: int, length: int, flags: int) -> NoReturn:
        _refuse("lock")

    def unlock(self, file_obj: object, offset: int, length: int) -> NoReturn:
        _refuse("unlock")

    def statvfs(self, path: bytes) -> NoReturn:
        _refuse("statvfs")

    def fstatvfs(self, file_obj: object) -> NoReturn:
        _refuse("fstatvfs")

    def fsync(self, file_obj: object) -> NoReturn:
        _refuse("fsync")
