"""The broker side of ``glob`` and ``search``: the shared walk (``operations._walk``) over fds.

:class:`TreeAccess` holds a directory opened beneath the root and gives the walk its two callbacks,
``list_dir`` and ``read_small``, over paths relative to that directory, and the ignore rules
the directory inherits from the directories above it (:meth:`TreeAccess.inherited_rules`, read
from a fresh fd of the root: never above it). Every open starts at the
directory fd and follows **no** symlink at all (``openat2`` with ``RESOLVE_NO_SYMLINKS``, or an
``O_NOFOLLOW`` open per component), so a link swapped in mid-walk makes that entry fail and be
skipped; nothing outside the root is listed or read.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import stat as st
import threading
from collections.abc import AsyncGenerator, Callable, Iterator
from types import TracebackType
from typing import Any, Self, TypeVar

from operations import (
    BINARY_SNIFF_BYTES,
    NO_RULES,
    FileKind,
    Gate,
    IgnoreRules,
    LineMatcher,
    OpsError,
    SearchMatch,
    Unavailable,
    parent_ignore_rules,
    search_tree,
)

from . import _openat2
from ._dirfd import errno_error, list_fd
from ._resolver import Root

__all__ = [
    "MAX_SEARCH_FILE_BYTES",
    "TreeAccess",
    "glob_in_thread",
    "iterate_in_thread",
    "run_in_thread",
    "search",
]

T = TypeVar("T")

MAX_SEARCH_FILE_BYTES = 64 * 1024 * 1024  # larger files are skipped by search (ripgrep would mmap)
MAX_IGNORE_FILE_BYTES = 1024 * 1024  # an ignore file larger than this is not an ignore file
_NO_LINKS = _openat2.RESOLVE_BENEATH | _openat2.RESOLVE_NO_MAGICLINKS | _openat2.RESOLVE_NO_SYMLINKS
_KINDS = {st.S_IFREG: FileKind.FILE, st.S_IFDIR: FileKind.DIRECTORY, st.S_IFLNK: FileKind.SYMLINK}


class Stopped(Exception):
    """Internal: the consumer went away; ends a walk running in a thread (never user-visible)."""


class TreeAccess:
    """Link-free access to the tree under ``path`` (a directory beneath the root).

    Use as a context manager: the directory fd is opened on entry. Leaving the block stops any
    walk using it; the fd is closed once the block *and* every thread that :meth:`retain`-ed it
    are done, so a cancelled caller never leaves a thread holding a closed (and perhaps reused)
    fd number.
    """

    def __init__(self, root: Root, op: str, path: str, gate: Gate | None = None) -> None:
        self._root = root
        self._op = op
        self.path = path
        self._gate = gate
        self._base = ""  # the opened directory's root-relative path (with a gate)
        self.fd = -1
        self.stopped = threading.Event()
        self._users = 0
        self._lock = threading.Lock()

    def __enter__(self) -> Self:
        gate = self._gate
        if gate is None:
            self.fd = self._root.open_dir(self._op, self.path)
        else:
            self.fd = self._root.open_dir(self._op, self.path, self._decide)
        self._users = 1
        return self

    def _decide(self, rel: str) -> None:
        assert self._gate is not None
        self._gate.read(rel)
        self._base = rel

    def hidden(self, rel: str) -> bool:
        """Whether the entry ``rel`` (relative to this directory, found by a walk that follows no
        link) is read-denied by the gate, judged on its path beneath the root."""
        if self._gate is None:
            return False
        return self._gate.hidden(f"{self._base}/{rel}" if self._base else rel)

    def hidden_match(self, path: str) -> bool:
        """:meth:`hidden` for a search match, whose path is ``self.path`` joined with the file's."""
        return self.hidden(path[len(self.path.rstrip("/")) + 1 :])

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stopped.set()
        self.release()

    def retain(self) -> None:
        """Keep the fd open for one more user (a thread), until its :meth:`release`."""
        with self._lock:
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self.fd >= 0:
                os.close(self.fd)
                self.fd = -1

    def open(self, rel: str, flags: int, *, dirfd: int | None = None) -> int:
        """Open ``rel`` beneath the directory (or ``dirfd``) without following any symlink."""
        if self.stopped.is_set():
            raise Stopped
        raw = os.fsencode(rel) if rel else b"."
        start = self.fd if dirfd is None else dirfd
        try:
            if self._root.strategy == "openat2":
                with contextlib.suppress(BlockingIOError):  # EAGAIN: fall back to the walk
                    return _openat2.openat2(start, raw, flags, resolve=_NO_LINKS)
            return _open_no_links(start, raw, flags)
        except OSError as exc:
            raise errno_error(self._op, rel, exc) from None

    def inherited_rules(self) -> IgnoreRules:
        """The rules of the ignore files in the directories between the root and this one
        (``operations.parent_ignore_rules``), found from the path the kernel names for this
        directory and read beneath a fresh fd of the root, following no symlink."""
        try:
            rel = self._root.where(self._op, self.path, self.fd)
        except Unavailable:  # no /proc: the lexical path (its opens follow no link either)
            rel = self._root.relative(self._op, self.path)
        if rel in ("", "."):
            return NO_RULES
        top = self._root.open_dir(self._op, self._root.path)
        try:
            return parent_ignore_rules(
                rel, lambda name: self.read(name, MAX_IGNORE_FILE_BYTES, dirfd=top)
            )
        finally:
            os.close(top)

    def list_dir(self, rel: str) -> list[tuple[str, FileKind]]:
        fd = self.open(rel, os.O_RDONLY | os.O_DIRECTORY)
        try:
            return [(name, _KINDS.get(kind, FileKind.OTHER)) for name, kind in list_fd(fd)]
        except OSError as exc:
            raise errno_error(self._op, rel, exc) from None
        finally:
            os.close(fd)

    def read(self, rel: str, limit: int, *, dirfd: int | None = None) -> bytes | None:
        """The content of the regular file ``rel``, or ``None`` if it is not one or is too big."""
        fd = self.open(rel, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY, dirfd=dirfd)
        try:
            info = os.fstat(fd)
            if not st.S_ISREG(info.st_mode) or info.st_size > limit:
                return None
            chunks = []
            while chunk := os.read(fd, 1024 * 1024):
                chunks.append(chunk)
            return b"".join(chunks)
        except OSError as exc:
            raise errno_error(self._op, rel, exc) from None
        finally:
            os.close(fd)

    def read_small(self, rel: str) -> bytes | None:
        """``read`` for ignore files (the walk's ``ReadFile`` callback)."""
        return self.read(rel, MAX_IGNORE_FILE_BYTES)

    def read_file(self, rel: str) -> bytes | None:
        """``read`` for searched files."""
        return self.read(rel, MAX_SEARCH_FILE_BYTES)

    def head(self, rel: str) -> bytes | None:
        """The first :data:`BINARY_SNIFF_BYTES` of regular file ``rel`` (``None`` if not one)."""
        try:
            fd = self.open(rel, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OpsError:
            return None
        try:
            if not st.S_ISREG(os.fstat(fd).st_mode):
                return None
            return os.read(fd, BINARY_SNIFF_BYTES)
        except OSError:
            return None
        finally:
            os.close(fd)


def _open_no_links(dirfd: int, raw: bytes, flags: int) -> int:
    parts = [p for p in raw.split(b"/") if p and p != b"."] or [b"."]
    if b".." in parts:
        raise OSError(errno.EXDEV, "'..' in a walk path")
    fd, owned = dirfd, False
    try:
        for part in parts[:-1]:
            next_fd = os.open(
                part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
            )
            if owned:
                os.close(fd)
            fd, owned = next_fd, True
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    finally:
        if owned:
            os.close(fd)


async def iterate_in_thread(
    tree: TreeAccess, produce: Callable[[], Iterator[T]]
) -> AsyncGenerator[T, None]:
    """Run the blocking iterator ``produce()`` in a thread and yield its items as they come.

    Closing the returned generator stops the thread at its next file-system call.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[bool, object]] = asyncio.Queue()

    def post(done: bool, item: object) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is listening
            loop.call_soon_threadsafe(queue.put_nowait, (done, item))

    def run() -> None:
        try:
            for item in produce():
                post(False, item)
                if tree.stopped.is_set():
                    break
            post(True, None)
        except Stopped:
            post(True, None)
        except BaseException as exc:
            post(True, exc)
        finally:
            tree.release()

    tree.retain()
    worker = loop.run_in_executor(None, run)
    try:
        while True:
            done, item = await queue.get()
            if done:
                if isinstance(item, BaseException):
                    raise item
                return
            yield item  # type: ignore[misc]
    finally:
        tree.stopped.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(worker)


async def search(
    tree: TreeAccess, matcher: LineMatcher, path: str, *, glob: str | None, limit: int
) -> AsyncGenerator[SearchMatch, None]:
    """The Python search: ``operations._search.search_tree`` over the tree's fds, in a thread."""

    def produce() -> Iterator[SearchMatch]:
        inherited = tree.inherited_rules()
        return search_tree(
            matcher,
            path,
            tree.list_dir,
            tree.read_file,
            glob=glob,
            limit=limit,
            inherited=inherited,
        )

    async with contextlib.aclosing(iterate_in_thread(tree, produce)) as matches:
        async for match in matches:
            yield match


async def run_in_thread(fn: Callable[[], T]) -> T:
    """Run ``fn`` in the default executor and return its result.

    **Cancellation:** once submitted, the job always runs to its end, even if the caller is
    cancelled first (``asyncio.to_thread`` would drop a job that has not started, and with it
    the cleanup the job owns, such as closing an fd); its result or error is then discarded.
    """
    future = asyncio.get_running_loop().run_in_executor(None, fn)
    future.add_done_callback(_retrieve)
    return await asyncio.shield(future)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # an abandoned job's error is not "never retrieved"


async def glob_in_thread(tree: TreeAccess, walk: Callable[[], T]) -> T:
    """Run ``walk`` (a blocking walk over ``tree``) in a thread that holds the tree's fd open."""
    tree.retain()

    def run() -> T:
        try:
            return walk()
        finally:
            tree.release()

    return await run_in_thread(run)
