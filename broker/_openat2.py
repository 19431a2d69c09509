"""``openat2(2)`` through ctypes: the kernel resolves a path and refuses to leave a directory fd.

Python's standard library has no wrapper for ``openat2`` (Linux >= 5.6, syscall 437 on every
architecture that uses the generic syscall table, x86-64 included). :func:`openat2` calls it with
``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS``: absolute paths, absolute symlinks and any ``..`` that
would climb above ``dirfd`` fail with ``EXDEV``, and ``/proc``-style magic links with ``ELOOP``.

:func:`available` probes the syscall once per process. ``ENOSYS`` (old kernel) and ``EPERM``
(seccomp filters in some container runtimes) mean "unavailable"; the resolver then walks paths
component by component instead.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from typing import Any

__all__ = [
    "RESOLVE_BENEATH",
    "RESOLVE_NO_MAGICLINKS",
    "RESOLVE_NO_SYMLINKS",
    "available",
    "openat2",
]

SYS_OPENAT2 = 437  # the generic syscall table number; identical on x86-64, arm64, riscv64
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
EAGAIN_RETRIES = 8  # the kernel says EAGAIN when a concurrent rename might let ".." escape; retry
# a few times, then the caller falls back to the userspace walk (cap-std retries 4 times)


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


_HOW_SIZE = ctypes.sizeof(_OpenHow)
_HOWS: dict[tuple[int, int, int], Any] = {}
_syscall = None
_available: bool | None = None

if sys.platform == "linux":
    _libc = ctypes.CDLL(None, use_errno=True)
    _syscall = _libc.syscall
    _syscall.restype = ctypes.c_long
    _syscall.argtypes = (
        ctypes.c_long,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_void_p,
        ctypes.c_size_t,
    )


def openat2(
    dirfd: int,
    path: bytes,
    flags: int,
    mode: int = 0,
    resolve: int = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
) -> int:
    """Open ``path`` beneath ``dirfd`` and return the new fd (``O_CLOEXEC`` is always added).

    Raises:
        OSError: with the kernel's errno; ``EXDEV`` means the path escapes ``dirfd``, ``EAGAIN``
            (after :data:`EAGAIN_RETRIES` tries) that concurrent renames kept racing.
    """
    if _syscall is None:
        raise OSError(errno.ENOSYS, "openat2 is Linux-only")
    key = (flags, mode, resolve)
    how = _HOWS.get(key)
    if how is None:  # one struct per distinct request, built once: the syscall is the hot path
        how = _HOWS[key] = ctypes.byref(_OpenHow(flags | os.O_CLOEXEC, mode, resolve))
    for _ in range(EAGAIN_RETRIES):
        fd: int = _syscall(SYS_OPENAT2, dirfd, path, how, _HOW_SIZE)
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err == errno.EINTR:
            continue
        if err != errno.EAGAIN:
            raise OSError(err, os.strerror(err), os.fsdecode(path))
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), os.fsdecode(path))


def available() -> bool:
    """Whether ``openat2`` works here; probed once (``ENOSYS`` / ``EPERM`` mean it does not)."""
    global _available
    if _available is None:
        _available = _probe()
    return _available


def _probe() -> bool:
    if _syscall is None:
        return False
    try:
        dirfd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fd = openat2(dirfd, b".", os.O_PATH | os.O_DIRECTORY)
    except OSError:
        return False  # ENOSYS (kernel < 5.6), EPERM (seccomp), E2BIG/EINVAL (odd kernels)
    finally:
        os.close(dirfd)
    os.close(fd)
    return True
