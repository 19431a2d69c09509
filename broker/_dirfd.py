"""Operations on ``(directory fd, name)`` pairs, and the one errno-to-error mapping.

The resolver (``_resolver``) finds the directory; these act on one name in it with the ``*at``
system calls, and none of them follows a final symlink on its own: where an operation wants the
link followed it raises :class:`FollowLink` and the resolver splices the link text in.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat as st

from operations import (
    AlreadyExists,
    DirectoryNotEmpty,
    EscapesRoot,
    InvalidArgument,
    IsADirectory,
    NotADirectory,
    NotFound,
    NotRegularFile,
    OpsError,
    PermissionDenied,
    TooLarge,
    TooManyLinks,
    Unavailable,
)

__all__ = [
    "NEW_FILE_MODE",
    "AtomicFile",
    "FollowLink",
    "atomic_write",
    "errno_error",
    "kind_error",
    "list_fd",
    "lstat_at",
    "mkdir_or_dir",
    "open_nofollow",
    "readlink_or_none",
    "remove_tree",
    "stat_dir",
    "stat_follow",
]

NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
DIR = os.O_DIRECTORY | os.O_CLOEXEC


class FollowLink(Exception):
    """Internal: the final name is a symlink the operation wants followed (never user-visible)."""


def errno_error(op: str, path: str, exc: OSError) -> OpsError:
    """The one place an errno becomes an Operations error."""
    code = exc.errno
    if code == errno.ENOENT:
        return NotFound(op, path)
    if code == errno.EISDIR:
        return IsADirectory(op, path)
    if code == errno.ENOTDIR:
        return NotADirectory(op, path)
    if code == errno.EEXIST:
        return AlreadyExists(op, path)
    if code == errno.ENOTEMPTY:
        return DirectoryNotEmpty(op, path)
    if code == errno.ELOOP:
        return TooManyLinks(op, path)
    if code == errno.EXDEV:
        return EscapesRoot(op, path)
    if code in (errno.EACCES, errno.EPERM, errno.EROFS, errno.EBUSY):
        return PermissionDenied(op, path, f"{os.strerror(code).lower()} (the operating system)")
    if code in (errno.ENAMETOOLONG, errno.EINVAL):
        return InvalidArgument(op, path, os.strerror(code).lower())
    if code == errno.ENXIO:
        return NotRegularFile(op, path)
    if code in (errno.EFBIG, errno.ENOSPC, errno.EDQUOT):
        return TooLarge(op, path, os.strerror(code).lower())
    if code == errno.EBADF:
        return Unavailable(op, path, "the workspace root is closed")
    return OpsError(op, path, os.strerror(code or 0).lower())


def kind_error(op: str, path: str, mode: int) -> OpsError:
    if st.S_ISDIR(mode):
        return IsADirectory(op, path)
    return NotRegularFile(op, path)


def readlink_or_none(dirfd: int, name: bytes) -> bytes | None:
    """The link text of ``name``, or ``None`` if it is not a symlink."""
    try:
        return os.readlink(name, dir_fd=dirfd)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOENT, errno.ENOTDIR):
            return None
        raise


def open_nofollow(dirfd: int, name: bytes, flags: int) -> int:
    try:
        return os.open(name, flags | NOFOLLOW, dir_fd=dirfd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and readlink_or_none(dirfd, name) is not None:
            raise FollowLink from None
        raise


def lstat_at(dirfd: int, name: bytes) -> os.stat_result:
    return os.stat(name, dir_fd=dirfd, follow_symlinks=False)


def stat_follow(dirfd: int, name: bytes) -> os.stat_result:
    info = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    if st.S_ISLNK(info.st_mode):
        raise FollowLink
    return info


def stat_dir(dirfd: int, name: bytes) -> None:
    if not st.S_ISDIR(stat_follow(dirfd, name).st_mode):
        raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))


def mkdir_or_dir(dirfd: int, name: bytes) -> None:
    """One step of ``mkdir -p``: create ``name``, or accept a directory (or link to one) there."""
    try:
        os.mkdir(name, 0o777, dir_fd=dirfd)
    except FileExistsError:
        stat_dir(dirfd, name)


def list_fd(fd: int) -> list[tuple[str, int]]:
    """The entries of the directory open at ``fd``, sorted by name, kinds not followed."""
    entries = []
    with os.scandir(fd) as it:
        for entry in it:
            if entry.is_symlink():
                kind = st.S_IFLNK
            elif entry.is_dir(follow_symlinks=False):
                kind = st.S_IFDIR
            elif entry.is_file(follow_symlinks=False):
                kind = st.S_IFREG
            else:
                kind = st.S_IFIFO  # any other kind: FIFO, socket, device
            entries.append((entry.name, kind))
    entries.sort()
    return entries


def remove_tree(dirfd: int, name: bytes) -> None:
    """Remove directory ``name`` and everything in it, each step relative to a directory fd."""
    fd = os.open(name, os.O_RDONLY | DIR | os.O_NOFOLLOW, dir_fd=dirfd)
    try:
        for child, kind in list_fd(fd):
            raw = os.fsencode(child)
            if kind == st.S_IFDIR:
                remove_tree(fd, raw)
            else:
                os.unlink(raw, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dirfd)


_UMASK = os.umask(0)
os.umask(_UMASK)
NEW_FILE_MODE = 0o666 & ~_UMASK  # what open(2) would give a new file


class AtomicFile:
    """A new file being written beside ``name`` in directory ``dirfd``, invisible until
    :meth:`commit` renames it over ``name``; :meth:`discard` removes it instead.

    It owns ``dirfd`` from the start (closed by ``commit`` and ``discard``, or at once if the
    temp file cannot be created), so a file written across many calls
    keeps its directory even if the path is renamed meanwhile. ``old`` is the file it replaces:
    its owner is kept when allowed, and its mode unless ``mode`` gives the file another.
    """

    __slots__ = ("_dirfd", "_fd", "_mode", "_name", "_old", "_temp")

    def __init__(
        self, dirfd: int, name: bytes, old: os.stat_result | None, mode: int | None = None
    ) -> None:
        self._temp = b".opsbroker-" + secrets.token_hex(8).encode() + b".tmp"
        try:
            self._fd = os.open(
                self._temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600, dir_fd=dirfd
            )
        except BaseException:
            os.close(dirfd)
            raise
        self._dirfd, self._name, self._old, self._mode = dirfd, name, old, mode

    def write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def commit(self, fsync: bool) -> None:
        """Give the file its final mode, flush it if asked, and rename it over ``name``."""
        try:
            old = self._old
            if old is not None:
                with contextlib.suppress(OSError):
                    os.fchown(self._fd, old.st_uid, old.st_gid)
            mode = self._mode
            if mode is None:
                mode = st.S_IMODE(old.st_mode) if old is not None else NEW_FILE_MODE
            os.fchmod(self._fd, mode)
            if fsync:
                os.fsync(self._fd)
            self._close_file()
            os.rename(self._temp, self._name, src_dir_fd=self._dirfd, dst_dir_fd=self._dirfd)
        except BaseException:
            self.discard()
            raise
        self._close_dir()

    def discard(self) -> None:
        """Remove the temp file and release both fds (after a failure; never raises; does
        nothing after ``commit``)."""
        self._close_file()
        if self._dirfd >= 0:
            with contextlib.suppress(OSError):
                os.unlink(self._temp, dir_fd=self._dirfd)
            self._close_dir()

    def _close_dir(self) -> None:
        if self._dirfd >= 0:
            fd, self._dirfd = self._dirfd, -1
            os.close(fd)

    def _close_file(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)


def atomic_write(
    dirfd: int,
    name: bytes,
    data: bytes,
    old: os.stat_result | None,
    fsync: bool,
    mode: int | None = None,
) -> None:
    """Replace ``name`` in ``dirfd`` with ``data`` through an :class:`AtomicFile`
    (``dirfd`` stays the caller's)."""
    target = AtomicFile(os.dup(dirfd), name, old, mode)
    try:
        target.write(data)
    except BaseException:
        target.discard()
        raise
    target.commit(fsync)
