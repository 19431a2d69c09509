"""Landlock signal scoping: a command may signal its own processes, never the broker.

A new session and process group stop ``kill 0`` and SIGIO tricks from reaching the broker, but a
process of the same user can still ``kill $PPID``. Landlock's ``LANDLOCK_SCOPE_SIGNAL`` (ABI 6,
Linux 6.12) denies signals from a sandboxed process to any process outside its Landlock domain, so
the command's tree can signal itself and nothing else. The ruleset handles no filesystem or
network access: it only scopes signals (filesystem confinement is a separate policy).

The ruleset fd is created once in the broker. ``restrict_self`` scopes the calling *thread*
(Landlock is per thread): the process manager calls it in a fresh thread that spawns one command
and exits, so each command gets a domain of its own and the broker's other threads stay outside.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["SignalScope"]

_SYS_LANDLOCK_CREATE_RULESET = 444  # same number on every architecture (generic syscall table)
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_SCOPE_SIGNAL = 1 << 1
_SCOPE_SIGNAL_ABI = 6
_PR_SET_NO_NEW_PRIVS = 38
_CAP_SYS_ADMIN = 21


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


def _has_cap_sys_admin() -> bool:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> _CAP_SYS_ADMIN & 1)
    except OSError:
        pass
    return False


class SignalScope:
    """A Landlock ruleset that scopes signals; :meth:`restrict_self` applies it to a thread.

    Use :meth:`create`, which returns ``None`` where the kernel lacks signal scoping.
    """

    def __init__(self, libc: ctypes.CDLL, ruleset_fd: int, need_no_new_privs: bool) -> None:
        self._libc = libc
        self._fd = ruleset_fd
        self._need_no_new_privs = need_no_new_privs

    @classmethod
    def create(cls) -> SignalScope | None:
        """Build the ruleset, or return ``None`` when Landlock signal scoping is unavailable."""
        try:
            libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            return None
        libc.syscall.restype = ctypes.c_long
        abi = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, 0, _LANDLOCK_CREATE_RULESET_VERSION)
        if abi < _SCOPE_SIGNAL_ABI:
            return None
        attr = _RulesetAttr(0, 0, _LANDLOCK_SCOPE_SIGNAL)
        fd = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0)
        if fd < 0:
            return None
        os.set_inheritable(int(fd), False)
        return cls(libc, int(fd), need_no_new_privs=not _has_cap_sys_admin())

    def restrict_self(self) -> None:
        """Enter a new scope on the calling thread. Raises ``OSError`` if the kernel refuses.

        Without ``CAP_SYS_ADMIN`` the kernel requires ``no_new_privs`` first, so set-uid programs
        (``sudo``) do not gain privileges inside a command.
        """
        if self._need_no_new_privs and self._libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if self._libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, self._fd, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
