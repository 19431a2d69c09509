"""Root confinement: every path is resolved beneath one directory fd, by the kernel where it can.

:class:`Root` opens the workspace root once and resolves each path beneath that fd, with one of two
strategies that give the same answers (Go ``os.Root`` semantics):

- ``openat2``: the kernel resolves with ``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`` (Linux >= 5.6);
- ``walk``: a component-by-component ``O_NOFOLLOW`` walk from the root fd, symlinks read with
  ``readlinkat`` and spliced in userspace, restarting at the root fd after each ``..`` run.

Rules (both strategies): a ``..`` may not climb above the root, even if a later component comes back
(``../ROOT/f`` escapes); an absolute symlink is an escape; more than :data:`MAX_SYMLINKS` links is
:class:`~operations.TooManyLinks`; ``..`` after a symlink is physical (``a => b/c``, ``a/../f`` is
``b/f``). A trailing slash asks for a directory and follows a final link (``link/`` is ``link/.``).

Operations act "via the parent": the parent directory is resolved beneath the root, then the final
name is handled by a ``*at(parent_fd, name)`` call that never follows a symlink on its own; where
an operation follows a final link (read, stat, write), the link text is spliced into the path and
resolution starts again, so the target is checked by the same rules.

Decisions on what is opened: every operation takes an optional ``check`` (or, for trees, a
:class:`~operations.Gate`), called with the root-relative path that was actually resolved, read
back from the fd the operation holds (``/proc/self/fd``), never from a second resolution of the
string; it is called after resolving and before the file is read, written, created, removed or
renamed, so a symlink swapped between the two cannot change the answer.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat as st
from collections.abc import Callable, Iterator
from typing import TypeVar

from operations import (
    MAX_TREE_CHECK,
    EscapesRoot,
    Gate,
    InvalidArgument,
    IsADirectory,
    NotADirectory,
    NotFound,
    PermissionDenied,
    TooLarge,
    TooManyLinks,
    Unavailable,
)

from . import _openat2
from ._dirfd import (
    AtomicFile,
    FollowLink,
    atomic_write,
    errno_error,
    kind_error,
    list_fd,
    lstat_at,
    mkdir_or_dir,
    open_nofollow,
    readlink_or_none,
    remove_tree,
    stat_dir,
    stat_follow,
)

__all__ = ["MAX_SYMLINKS", "STRATEGIES", "Check", "Root"]

T = TypeVar("T")
Check = Callable[[str], None]
"""Called with the root-relative path an operation resolved, before it is used; raises to
refuse (a :class:`~operations.Gate` method, usually)."""

MAX_SYMLINKS = 40  # Linux's own MAXSYMLINKS, so both strategies give up on the same chains
MAX_PATH = 4096  # PATH_MAX: longer paths are refused before any syscall
MAX_NAME = 255  # NAME_MAX: a longer component can name nothing
MAX_WALK_STEPS = 4096  # directory opens in one walk; bounds the restarts a `..`-heavy path causes
STRATEGIES = ("openat2", "walk")

_DIR = os.O_DIRECTORY | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY  # O_NONBLOCK: opening a FIFO never waits


class Root:
    """A workspace root held as a directory fd; nothing it does reaches outside that directory.

    Guarantees: no path, ``..`` or symlink resolves outside the root, whatever the timing; reads open
    regular files only (a FIFO, socket or device is refused without blocking); writes are atomic.
    Not prevented: bind mounts and hard links inside the root (they are the operator's choice).

    Races: a concurrent rename or symlink swap inside the root may make an operation act on another
    file than the one the caller meant, but that file is always inside the root (every step is
    relative to an fd already beneath it).

    Paths are absolute and must lie under the root, compared component by component in either the
    given or the canonical spelling of the root (``/w/project2`` is not under ``/w/project``).

    Args:
        path: the root directory. It is canonicalised once, here.
        strategy: ``"openat2"`` or ``"walk"`` to force one (tests); ``None`` picks ``openat2`` when
            the kernel allows it.
    """

    def __init__(self, path: str, *, strategy: str | None = None) -> None:
        if strategy is None:
            strategy = "openat2" if _openat2.available() else "walk"
        if strategy not in STRATEGIES:
            raise InvalidArgument("open_root", path, f"unknown strategy {strategy!r}")
        if strategy == "openat2" and not _openat2.available():
            raise Unavailable("open_root", path, "openat2 is not available on this system")
        self.strategy = strategy
        self.path = os.path.abspath(path)
        self.real = os.path.realpath(path)
        try:
            self._fd = os.open(self.real, os.O_RDONLY | _DIR)
        except OSError as exc:
            raise errno_error("open_root", path, exc) from None
        self._real_raw = os.fsencode(self.real)
        self._prefixes = [_components(os.fsencode(self.path)), _components(self._real_raw)]
        self._fast_prefix = os.fsencode(self.path.rstrip("/") + "/")

    def capabilities(self) -> dict[str, object]:
        """Which resolver runs and what the kernel offers (reported by the broker)."""
        return {"resolver": self.strategy, "openat2_available": _openat2.available()}

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    @property
    def closed(self) -> bool:
        return self._fd < 0

    # --- what was resolved --------------------------------------------------------------------

    def where(self, op: str, path: str, fd: int, name: bytes | None = None) -> str:
        """The root-relative path of what ``fd`` holds (joined with ``name`` inside it), as the
        kernel names the open file: the path actually resolved, not the string asked for.

        Raises:
            Unavailable: the kernel names no path under the root (the root was moved, or a
                mount hides it): the caller cannot be told what it would act on.
        """
        if fd == self._fd:
            rel = b""
        else:
            try:
                full = os.readlink(b"/proc/self/fd/%d" % fd)
            except OSError as exc:
                raise Unavailable(op, path, f"cannot read which file was opened: {exc}") from None
            if full.endswith(b" (deleted)") and os.fstat(fd).st_nlink == 0:
                full = full[: -len(b" (deleted)")]  # removed since: it was opened at that name
            rel = self._beneath(op, path, full)
        if name is not None and name != b".":
            rel = rel + b"/" + name if rel else name
        return os.fsdecode(rel)

    def _beneath(self, op: str, path: str, full: bytes) -> bytes:
        root = self._real_raw
        if full == root:
            return b""
        prefix = root if root == b"/" else root + b"/"
        if full.startswith(prefix):
            return full[len(prefix) :]
        raise Unavailable(
            op,
            path,
            f"opened a file the kernel does not name under the root {self.real}; "
            "was the workspace root moved? restart the broker",
        )

    # --- path parsing -------------------------------------------------------------------------

    def relative(self, op: str, path: str) -> str:
        """``path`` relative to the root, lexically (for messages, audit and result paths)."""
        parts = self._split(op, path)
        return os.fsdecode(b"/".join(parts))

    def _split(self, op: str, path: str) -> list[bytes]:
        """Check ``path`` and return its components beneath the root, ``.`` dropped.

        A trailing slash, or a final ``..``, becomes a final ``.`` (a directory is meant); the root
        itself is ``[b"."]``.
        """
        if self._fd < 0:
            raise Unavailable(op, path, "the workspace root is closed")
        if not isinstance(path, str):
            raise InvalidArgument(op, repr(path), "a path must be a string")
        if not path:
            raise InvalidArgument(op, path, "empty path")
        if "\x00" in path:
            raise InvalidArgument(op, path, "path contains a NUL byte")
        try:
            raw = path.encode("utf-8")  # strict: a surrogate escape (undecodable name) is refused
        except UnicodeError:
            raise InvalidArgument(op, path, "path is not valid UTF-8") from None
        if len(raw) > MAX_PATH:
            raise InvalidArgument(op, path, f"path longer than {MAX_PATH} bytes")
        if raw.startswith(self._fast_prefix):  # the common case: a clean path under the root
            parts = raw[len(self._fast_prefix) :].split(b"/")
            if b"" not in parts and b"." not in parts and b".." not in parts:
                if max(map(len, parts)) > MAX_NAME:
                    raise InvalidArgument(
                        op, path, f"a path component is longer than {MAX_NAME} bytes"
                    )
                return parts
        if not raw.startswith(b"/"):
            raise InvalidArgument(op, path, f"expected an absolute path under {self.path}")
        parts = _components(raw)
        for prefix in self._prefixes:
            if parts[: len(prefix)] == prefix:
                parts = parts[len(prefix) :]
                break
        else:
            raise EscapesRoot(op, path, f"path is outside the workspace root {self.path}")
        for part in parts:
            if len(part) > MAX_NAME:
                raise InvalidArgument(op, path, f"a path component is longer than {MAX_NAME} bytes")
        if raw.endswith(b"/") or raw.endswith(b"/.") or raw == b".":
            parts.append(b".")
        return _finish(parts)

    def _split_mutation(self, op: str, path: str) -> tuple[list[bytes], bool]:
        """As :meth:`_split`, for operations on the final name itself: ``(parts, must_be_dir)``."""
        parts = self._split(op, path)
        if len(parts) > 1 and parts[-1] == b".":
            parts.pop()
            return parts, True
        return parts, False

    # --- the resolver -------------------------------------------------------------------------

    def _parent(self, op: str, path: str, parts: list[bytes], links: list[int]) -> tuple[int, bool]:
        """Open the directory holding ``parts[-1]``: ``(fd, owned)``. May rewrite ``parts``."""
        if len(parts) == 1:
            return self._fd, False
        if self.strategy == "openat2":
            try:
                return _openat2.openat2(self._fd, b"/".join(parts[:-1]), os.O_PATH | _DIR), True
            except OSError as exc:
                if exc.errno != errno.EAGAIN:
                    raise
                # Renames kept racing with the kernel's check; the walk gives the same answer.
        return self._walk(op, path, parts, links)

    def _walk(self, op: str, path: str, parts: list[bytes], links: list[int]) -> tuple[int, bool]:
        fd, owned = self._fd, False
        i = steps = 0
        try:
            while i < len(parts) - 1:
                name = parts[i]
                if name == b"..":
                    count = 1
                    while parts[i + count] == b"..":  # the final part is never ".."
                        count += 1
                    if count > i:
                        raise EscapesRoot(op, path)
                    del parts[i - count : i + count]
                    i = 0
                    if owned:
                        os.close(fd)
                    fd, owned = self._fd, False
                    continue
                steps += 1
                if steps > MAX_WALK_STEPS:
                    raise InvalidArgument(op, path, "path needs too many steps to resolve")
                try:
                    next_fd = os.open(name, os.O_PATH | _DIR | os.O_NOFOLLOW, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                        raise
                    target = readlink_or_none(fd, name)
                    if target is None:
                        raise
                    parts[i : i + 1] = _link_components(op, path, target, links)
                    continue
                if owned:
                    os.close(fd)
                fd, owned = next_fd, True
                i += 1
        except BaseException:
            if owned:
                os.close(fd)
            raise
        return fd, owned

    def _at(
        self,
        op: str,
        path: str,
        parts: list[bytes],
        fn: Callable[[int, bytes], T],
    ) -> T:
        """Resolve the parent of ``parts`` and call ``fn(parent_fd, name)``.

        ``fn`` never follows a final symlink itself; it raises :class:`FollowLink` to have it
        followed, and the link text is spliced in and checked like any other path.
        """
        links = [0]
        parts = list(parts)
        while True:
            fd, owned = self._parent(op, path, parts, links)
            try:
                return fn(fd, parts[-1])
            except FollowLink:
                target = readlink_or_none(fd, parts[-1])
            finally:
                if owned:
                    os.close(fd)
            if target is None:  # replaced by a non-link since fn looked: look again (counted)
                links[0] += 1
                if links[0] > MAX_SYMLINKS:
                    raise TooManyLinks(op, path)
                continue
            parts = _finish(parts[:-1] + _link_components(op, path, target, links, final=True))

    @contextlib.contextmanager
    def _errors(self, op: str, path: str) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise errno_error(op, path, exc) from None
        except RecursionError:
            raise InvalidArgument(op, path, "directory tree too deep") from None

    # --- operations ---------------------------------------------------------------------------

    def open_file(
        self, op: str, path: str, check: Check | None = None
    ) -> tuple[int, os.stat_result]:
        """Open the regular file at ``path`` for reading (final links followed inside the root).

        Returns the fd (the caller closes it) and its ``fstat``; ``check`` is called with the
        path of the opened file before it is returned.
        """
        parts = self._split(op, path)
        try:  # not `self._errors`: this is the hot path, and a context manager costs a microsecond
            fd = self._open(op, path, parts, _READ)
            info = os.fstat(fd)
        except OSError as exc:
            if check is not None and exc.errno == errno.ENOENT:
                self._check_missing(op, path, parts, check)
            raise errno_error(op, path, exc) from None
        if not st.S_ISREG(info.st_mode):
            os.close(fd)
            raise kind_error(op, path, info.st_mode)
        if check is not None:
            self._checked(op, path, fd, check)
        return fd, info

    def _checked(self, op: str, path: str, fd: int, check: Check) -> None:
        """Ask ``check`` about the path ``fd`` holds; close ``fd`` if it refuses."""
        try:
            check(self.where(op, path, fd))
        except BaseException:
            os.close(fd)
            raise

    def _check_missing(self, op: str, path: str, parts: list[bytes], check: Check) -> None:
        """Ask ``check`` about a missing final name (in its resolved parent, a dangling link
        followed), so that a denied path is refused whether or not it exists: a refusal must
        not tell what exists. Returns quietly if the parent is missing too."""

        def decide(d: int, n: bytes) -> None:
            with contextlib.suppress(FileNotFoundError):
                if st.S_ISLNK(os.stat(n, dir_fd=d, follow_symlinks=False).st_mode):
                    raise FollowLink
            check(self.where(op, path, d, n))

        with contextlib.suppress(OSError, NotFound, NotADirectory):
            self._at(op, path, parts, decide)

    def open_dir(self, op: str, path: str, check: Check | None = None) -> int:
        """Open the directory at ``path`` (final links followed inside the root)."""
        parts = self._split(op, path)
        try:
            fd = self._open(op, path, parts, os.O_RDONLY | _DIR)
        except OSError as exc:
            if check is not None and exc.errno == errno.ENOENT:
                self._check_missing(op, path, parts, check)
            raise errno_error(op, path, exc) from None
        if check is not None:
            self._checked(op, path, fd, check)
        return fd

    def _open(self, op: str, path: str, parts: list[bytes], flags: int) -> int:
        if self.strategy == "openat2":
            try:
                return _openat2.openat2(self._fd, b"/".join(parts), flags)
            except OSError as exc:
                if exc.errno != errno.EAGAIN:
                    raise
        return self._at(op, path, parts, lambda d, n: open_nofollow(d, n, flags))

    def stat(self, op: str, path: str, check: Check | None = None) -> os.stat_result:
        """``stat`` of ``path``, following symlinks inside the root."""
        return self._stat(op, path, stat_follow, check)

    def lstat(self, op: str, path: str, check: Check | None = None) -> os.stat_result:
        """``lstat`` of ``path``: a final symlink is reported, not followed."""
        return self._stat(op, path, lstat_at, check)

    def _stat(
        self,
        op: str,
        path: str,
        fn: Callable[[int, bytes], os.stat_result],
        check: Check | None,
    ) -> os.stat_result:
        parts = self._split(op, path)

        def stat(d: int, n: bytes) -> os.stat_result:
            info = fn(d, n)
            if check is not None:
                check(self.where(op, path, d, n))
            return info

        with self._errors(op, path):
            return self._at(op, path, parts, stat if check is not None else fn)

    def readlink(self, op: str, path: str) -> str:
        parts, _ = self._split_mutation(op, path)
        with self._errors(op, path):
            return os.fsdecode(self._at(op, path, parts, lambda d, n: os.readlink(n, dir_fd=d)))

    def access(
        self, op: str, path: str, *, writable: bool = False, check: Check | None = None
    ) -> None:
        """Raise unless ``path`` exists (following links inside the root) and is readable
        (and writable, if asked) for this process."""
        mode = os.R_OK | (os.W_OK if writable else 0)
        decide = check

        def check_at(d: int, n: bytes) -> None:
            stat_follow(d, n)
            if decide is not None:
                decide(self.where(op, path, d, n))
            if not os.access(n, mode, dir_fd=d, effective_ids=True, follow_symlinks=False):
                what = "readable and writable" if writable else "readable"
                raise PermissionDenied(op, path, f"not {what} (the operating system)")

        parts = self._split(op, path)
        with self._errors(op, path):
            self._at(op, path, parts, check_at)

    def list_dir(self, op: str, path: str, check: Check | None = None) -> list[tuple[str, int]]:
        """The entries of directory ``path`` as ``(name, st_mode file type)``, links not followed.

        Read from the directory fd: types come from ``d_type`` or ``fstatat`` relative to that fd,
        never from a path-based ``lstat`` (Go's CVE-2026-27139).
        """
        fd = self.open_dir(op, path, check)
        with self._errors(op, path):
            try:
                return list_fd(fd)
            finally:
                os.close(fd)

    def mkdir(
        self,
        op: str,
        path: str,
        *,
        parents: bool = True,
        mode: int = 0o777,
        check: Check | None = None,
    ) -> None:
        """Create directory ``path`` (and, with ``parents``, missing parents), each step via its
        parent fd. An existing directory is not an error; an existing symlink at ``path`` is.
        ``check`` is asked about every directory before it is created."""
        parts, _ = self._split_mutation(op, path)

        def make(d: int, n: bytes) -> None:
            if check is not None:
                check(self.where(op, path, d, n))
            try:
                os.mkdir(n, mode, dir_fd=d)
            except FileExistsError:
                info = os.stat(n, dir_fd=d, follow_symlinks=False)
                if st.S_ISLNK(info.st_mode) and self._is_dir_beneath(op, path, parts):
                    return  # a link to a directory inside the root, as `mkdir -p` accepts
                if not st.S_ISDIR(info.st_mode):
                    raise
            except OSError as exc:
                if exc.errno == errno.EINVAL and n in (b".", b".."):
                    return
                raise

        def step(d: int, n: bytes) -> None:
            if check is not None:
                check(self.where(op, path, d, n))
            mkdir_or_dir(d, n)

        with self._errors(op, path):
            if parts[-1] == b"..":
                self._at(op, path, [*parts, b"."], stat_dir)
                return
            try:
                self._at(op, path, parts, make)
            except (FileNotFoundError, NotFound):
                if not parents or len(parts) == 1:
                    raise
                for end in range(1, len(parts)):
                    prefix = _finish(parts[:end])
                    if prefix[-1] == b".":
                        self._at(op, path, prefix, stat_dir)
                    else:
                        self._at(op, path, prefix, step)
                self._at(op, path, parts, make)

    def _is_dir_beneath(self, op: str, path: str, parts: list[bytes]) -> bool:
        """Whether ``parts`` resolves, links followed beneath the root, to a directory.

        ``False`` for a dangling link or one naming a file (mkdir then says AlreadyExists); a link
        that leaves the root or loops raises EscapesRoot / TooManyLinks, as the other operations
        do (the conformance suite pins it)."""
        try:
            self._at(op, path, [*parts, b"."], stat_dir)
        except (NotFound, NotADirectory, FileNotFoundError, NotADirectoryError):
            return False
        return True

    def remove(
        self, op: str, path: str, *, recursive: bool = False, gate: Gate | None = None
    ) -> None:
        """Remove a file, a symlink (never its target) or a directory (empty unless recursive).

        ``gate.write`` is asked about the entry and, for a recursive remove, about every entry
        below it (listed from the directory fd) before anything is removed.
        """
        parts, must_be_dir = self._split_mutation(op, path)
        self._check_names(op, path, parts, must_be_dir, "remove")

        def remove(d: int, n: bytes) -> None:
            info = os.stat(n, dir_fd=d, follow_symlinks=False)
            if gate is not None:
                top = self.where(op, path, d, n)
                gate.write(top)
                if recursive and st.S_ISDIR(info.st_mode):
                    for rel in _tree(d, n, gate):
                        gate.write(f"{top}/{rel}", shown=f"{path.rstrip('/')}/{rel}")
            if st.S_ISDIR(info.st_mode):
                if recursive:
                    remove_tree(d, n)
                else:
                    os.rmdir(n, dir_fd=d)
            elif must_be_dir:
                raise NotADirectory(op, path)
            else:
                os.unlink(n, dir_fd=d)

        with self._errors(op, path):
            self._at(op, path, parts, remove)

    def rename(self, op: str, source: str, destination: str, *, gate: Gate | None = None) -> None:
        """Rename ``source`` to ``destination``; a final symlink at either end is moved or replaced,
        never followed. Both parents are resolved beneath the root.

        ``gate.move`` is asked about both resolved ends and, when a directory moves, about every
        entry below it (listed from the directory fd), before the rename."""
        src, src_dir = self._split_mutation(op, source)
        dst, dst_dir = self._split_mutation(op, destination)
        self._check_names(op, source, src, src_dir, "rename")
        self._check_names(op, destination, dst, dst_dir, "rename")

        def inner(sd: int, sn: bytes) -> None:
            if src_dir or dst_dir:
                info = os.stat(sn, dir_fd=sd, follow_symlinks=False)
                if not st.S_ISDIR(info.st_mode):
                    raise NotADirectory(op, source)

            def move(dd: int, dn: bytes) -> None:
                if gate is not None:
                    src_rel = self.where(op, source, sd, sn)
                    dst_rel = self.where(op, destination, dd, dn)
                    gate.move(src_rel, dst_rel)
                    info = os.stat(sn, dir_fd=sd, follow_symlinks=False)
                    if st.S_ISDIR(info.st_mode):
                        for rel in _tree(sd, sn, gate):
                            gate.move(
                                f"{src_rel}/{rel}",
                                f"{dst_rel}/{rel}",
                                shown=f"{source.rstrip('/')}/{rel}",
                            )
                try:
                    os.rename(sn, dn, src_dir_fd=sd, dst_dir_fd=dd)
                except OSError as exc:
                    if exc.errno == errno.EXDEV:
                        raise InvalidArgument(
                            op, source, "cannot rename across filesystems"
                        ) from None
                    raise errno_error(op, source, exc) from None

            with self._errors(op, destination):
                self._at(op, destination, dst, move)

        with self._errors(op, source):
            self._at(op, source, src, inner)

    def write(
        self,
        op: str,
        path: str,
        data: bytes,
        *,
        fsync: bool = False,
        max_bytes: int | None = None,
        check: Check | None = None,
        mode: int | None = None,
    ) -> None:
        """Replace or create the file at ``path`` atomically: a temp file in the same directory
        (via the parent fd), then ``renameat`` over the name. A final symlink is followed only to
        its target inside the root; the file gets ``mode`` if given, else a replaced file keeps
        its own (and, when allowed, its owner)."""
        if max_bytes is not None and len(data) > max_bytes:
            raise TooLarge(op, path, f"{len(data)} bytes exceed the write limit of {max_bytes}")
        self._replace(op, path, lambda d, n, old: atomic_write(d, n, data, old, fsync, mode), check)

    def open_atomic(
        self, op: str, path: str, check: Check | None = None, mode: int | None = None
    ) -> AtomicFile:
        """Start replacing or creating the file at ``path`` as :meth:`write` does, for content
        that arrives in pieces: write them to the returned file, then ``commit`` (or
        ``discard``). Nothing is visible at ``path`` before ``commit``."""
        return self._replace(op, path, lambda d, n, old: AtomicFile(os.dup(d), n, old, mode), check)

    def _replace(
        self,
        op: str,
        path: str,
        fn: Callable[[int, bytes, os.stat_result | None], T],
        check: Check | None,
    ) -> T:
        """Resolve ``path`` for writing a regular file and call ``fn(parent_fd, name, old)``,
        ``old`` being the ``lstat`` of the regular file it replaces (``None`` if there is none);
        ``check`` is asked about the final path (links followed) first."""
        parts, must_be_dir = self._split_mutation(op, path)
        if must_be_dir or parts[-1] in (b".", b".."):
            # "name/" asks for a directory: writing a file there is never possible.
            with self._errors(op, path):
                with contextlib.suppress(NotFound, FileNotFoundError):  # resolved: escapes say so
                    self._at(op, path, [*parts, b"."], stat_follow)
                raise IsADirectory(op, path)

        def replace(d: int, n: bytes) -> T:
            try:
                old: os.stat_result | None = os.stat(n, dir_fd=d, follow_symlinks=False)
            except FileNotFoundError:
                old = None
            if old is not None:
                if st.S_ISLNK(old.st_mode):
                    raise FollowLink
                if not st.S_ISREG(old.st_mode):
                    raise kind_error(op, path, old.st_mode)
            if check is not None:
                check(self.where(op, path, d, n))
            return fn(d, n, old)

        with self._errors(op, path):
            return self._at(op, path, parts, replace)

    def _check_names(
        self, op: str, path: str, parts: list[bytes], must_be_dir: bool, what: str
    ) -> None:
        """Refuse the root, ``.`` and ``..`` as the object of ``what``; before that, resolve a
        path that names a directory (``..``, a trailing slash) so that an escape says so."""
        if must_be_dir or parts[-1] in (b".", b".."):
            with self._errors(op, path), contextlib.suppress(NotFound, FileNotFoundError):
                self._at(op, path, [*parts, b"."] if parts[-1] != b"." else parts, lstat_at)
        if parts == [b"."]:
            raise InvalidArgument(op, path, f"cannot {what} the workspace root")
        if parts[-1] in (b".", b".."):
            raise InvalidArgument(op, path, f"cannot {what} a path ending in '.' or '..'")


def _tree(dirfd: int, name: bytes, gate: Gate) -> list[str]:
    """The entries below directory ``name`` (relative to it), listed through fds without
    following a link (one fd open per level); more than :data:`~operations.MAX_TREE_CHECK` is
    the gate's refusal."""
    found: list[str] = []

    def visit(parent: int, entry: bytes, prefix: str) -> None:
        fd = os.open(entry, os.O_RDONLY | _DIR | os.O_NOFOLLOW, dir_fd=parent)
        try:
            for child, kind in list_fd(fd):
                found.append(prefix + child)
                if len(found) > MAX_TREE_CHECK:
                    raise gate.tree_too_large()
                if kind == st.S_IFDIR:
                    visit(fd, os.fsencode(child), f"{prefix}{child}/")
        finally:
            os.close(fd)

    visit(dirfd, name, "")
    return found


# --- path components ---------------------------------------------------------------------------


def _components(raw: bytes) -> list[bytes]:
    return [part for part in raw.split(b"/") if part and part != b"."]


def _finish(parts: list[bytes]) -> list[bytes]:
    """Make the final part name something an ``*at`` call can act on: never ``..``, never empty."""
    if not parts or parts[-1] == b"..":
        parts.append(b".")
    return parts


def _link_components(
    op: str, path: str, target: bytes, links: list[int], *, final: bool = False
) -> list[bytes]:
    links[0] += 1
    if links[0] > MAX_SYMLINKS:
        raise TooManyLinks(op, path)
    if target.startswith(b"/"):
        raise EscapesRoot(op, path, "an absolute symlink leads outside the workspace root")
    if not target:
        raise NotFound(op, path, "empty symlink")
    parts = _components(target)
    if final and (target.endswith(b"/") or target.endswith(b"/.") or target == b"."):
        parts.append(b".")
    return parts
