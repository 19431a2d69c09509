"""Finding and signalling a command's processes through ``/proc`` and pidfds (Linux).

The fallback tree tracking, used where no writable cgroup v2 tree exists: a process belongs to a
command when it is in the command's session (the leader's pid), carries the command's environment
cookie (``OPSBROKER_EXEC_ID``), or descends from a process that does. ``setsid`` and double forks
keep the cookie, so they are found; a process that both leaves the session and scrubs its
environment is found only while its parent is a member (cgroups close that gap).

Signals go through pidfds: the pidfd is opened first, membership is checked after, so a pid that
was reused in between is never signalled (the pidfd names the old, dead process).

A cookie also names the broker process that started the command (:func:`owner_id`), so that a
broker killed before it could clean up leaves commands the next one can recognise and kill
(:func:`kill_commands`), as cgroup mode does with the groups such a broker leaves.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "COOKIE_VAR",
    "PIDFD_SIGNAL_PROCESS_GROUP",
    "ProcStat",
    "has_pidfd",
    "is_child_subreaper",
    "kill_commands",
    "own_children",
    "owner_gone",
    "owner_id",
    "pidfd_signal",
    "proc_pids",
    "read_cookie",
    "read_stat",
    "set_child_subreaper",
    "stats_since",
]

COOKIE_VAR = "OPSBROKER_EXEC_ID"
"""Environment variable set in every command: its value names the command (Jenkins' technique)."""

_OWNED_COOKIE = re.compile(rb"(\d+-\d+-\d+)-[0-9a-f]+\.[0-9a-f]+\Z")
"""A cookie: ``<owner_id()>-<manager token>.<command id>``."""

EXEC_SETTLE_S = 0.1
"""How long a cookie read waits for a process caught inside ``execve`` to show its environment.
An exec takes well under a millisecond, but a loaded machine may not run the process for tens of
milliseconds meanwhile (20 ms here once missed one exec in 300 during a full test run); the wait
is paid only for a process met inside ``execve``."""

PIDFD_SIGNAL_PROCESS_GROUP = 1 << 2
"""``pidfd_send_signal`` flag (Linux 6.9): signal the pidfd's process group."""

_PF_KTHREAD = 0x00200000

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
_libc: ctypes.CDLL | None = None


def _prctl() -> ctypes.CDLL | None:
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            return None
    return _libc


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the tree tracking needs."""

    pid: int
    state: str
    ppid: int
    pgrp: int
    sid: int
    starttime: int
    flags: int = 0
    env_start: int = 0
    """Where the environment starts in memory; 0 while ``execve`` has not set it up yet (or
    for a process whose memory this one may not read)."""

    @property
    def alive(self) -> bool:
        """False for zombies and dead tasks: they hold no resources a kill could free."""
        return self.state not in ("Z", "X", "x")

    @property
    def kernel_thread(self) -> bool:
        return bool(self.flags & _PF_KTHREAD)


def _read_small(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)


def _parse_stat(pid: int, raw: bytes) -> ProcStat | None:
    # The command name may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return ProcStat(
            pid=pid,
            state=fields[0].decode(),
            ppid=int(fields[1]),
            pgrp=int(fields[2]),
            sid=int(fields[3]),
            starttime=int(fields[19]),
            flags=int(fields[6]),
            env_start=int(fields[47]) if len(fields) > 47 else 0,
        )
    except (IndexError, ValueError):
        return None


def read_stat(pid: int) -> ProcStat | None:
    """Parse ``/proc/<pid>/stat``; ``None`` when the process is gone."""
    raw = _read_small(f"/proc/{pid}/stat")
    return None if raw is None else _parse_stat(pid, raw)


def stats_since(starttime: int, exclude: tuple[int, ...] = ()) -> dict[int, ProcStat]:
    """Every process started at or after ``starttime`` (clock ticks since boot), by pid.

    One read of ``/proc/<pid>/stat`` per process; older processes are skipped before parsing.
    """
    out: dict[int, ProcStat] = {}
    for pid in proc_pids():
        if pid in exclude:
            continue
        raw = _read_small(f"/proc/{pid}/stat")
        if raw is None:
            continue
        tail = raw[raw.rfind(b")") + 2 :].split(maxsplit=20)
        try:
            if int(tail[19]) < starttime:
                continue
        except (IndexError, ValueError):
            continue
        st = _parse_stat(pid, raw)
        if st is not None:
            out[pid] = st
    return out


def proc_pids() -> Iterator[int]:
    """Every pid currently listed in ``/proc``."""
    with os.scandir("/proc") as it:
        for entry in it:
            if entry.name.isdigit():
                yield int(entry.name)


def own_children() -> list[int] | None:
    """This process's children, from every thread's ``children`` list: a few reads instead of a
    ``/proc`` sweep.

    ``None`` where the list cannot be trusted: the kernel lacks it (``CONFIG_PROC_CHILDREN``), or
    a thread came or went meanwhile (a leaving thread's children move to another thread, which may
    have been read already).
    """
    try:
        tasks = os.listdir("/proc/self/task")
        children: list[int] = []
        for tid in tasks:
            with open(f"/proc/self/task/{tid}/children", "rb", buffering=0) as f:
                children.extend(map(int, f.read().split()))
        if os.listdir("/proc/self/task") != tasks:
            return None
    except (OSError, ValueError):
        return None
    return children


def read_cookie(pid: int) -> bytes | None:
    """The value of ``OPSBROKER_EXEC_ID`` in a process's environment, if it has one.

    A process caught inside ``execve`` shows no environment (or ``ESRCH``) for a moment, until
    the kernel has set up its new one (``env_start`` in its stat is 0 until then); it is read
    again, for up to :data:`EXEC_SETTLE_S`, rather than taken for one without a cookie, which
    would let a command's process that happens to be exec'ing escape a sweep. A process whose
    environment is set up and empty (``env -i``) costs no wait.
    """
    deadline = None
    seen_env_start = 0  # the environment last seen set up: a second empty read confirms it
    while True:
        in_exec = False
        try:
            with open(f"/proc/{pid}/environ", "rb", buffering=0) as f:
                environ = f.read()
        except (FileNotFoundError, PermissionError):
            return None  # gone, or not ours to read
        except OSError:
            environ, in_exec = b"", True  # ESRCH: inside execve
        if environ:
            key = COOKIE_VAR.encode() + b"="
            for item in environ.split(b"\0"):
                if item.startswith(key):
                    return item[len(key) :]
            return None
        st = read_stat(pid)
        if st is None or not st.alive or st.kernel_thread:
            return None  # gone, a zombie or a kernel thread
        settled = bool(st.env_start) and not in_exec
        if settled and st.env_start == seen_env_start:
            return None  # an environment set up empty (env -i), read twice
        now = time.monotonic()
        deadline = deadline or now + EXEC_SETTLE_S
        if now >= deadline:
            return None
        if settled:
            # The read may have met the old memory on its way out: one more read, at once.
            seen_env_start = st.env_start
        else:
            os.sched_yield()  # inside execve: let it finish


def has_pidfd() -> bool:
    """Whether this kernel and Python have ``pidfd_open`` and ``pidfd_send_signal``."""
    if not hasattr(os, "pidfd_open") or not hasattr(signal, "pidfd_send_signal"):
        return False
    try:
        fd = os.pidfd_open(os.getpid())
    except OSError:
        return False
    os.close(fd)
    return True


def pidfd_signal(pid: int, sig: int, still_member: object = None) -> bool:
    """Send ``sig`` to ``pid`` through a pidfd, if ``still_member(pid)`` holds once it is open.

    ``still_member`` is a callable ``(pid) -> bool`` re-checked after the pidfd is open (so the
    check and the signal name the same process), or ``None`` to skip the check. Returns whether
    the signal was sent.
    """
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        if callable(still_member) and not still_member(pid):
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def set_child_subreaper(on: bool = True) -> bool:
    """Make this process the child subreaper (orphaned descendants re-parent here, not to init),
    or stop being it."""
    libc = _prctl()
    return libc is not None and int(libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)) == 0


def is_child_subreaper() -> bool:
    """Whether this process is a child subreaper (set by a manager or by the embedder)."""
    libc = _prctl()
    if libc is None:
        return False
    value = ctypes.c_int(0)
    return int(libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0)) == 0 and bool(
        value.value
    )


def pid_namespace() -> int:
    """This process's pid namespace (its inode), or 0 where ``/proc`` does not say."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def owner_id() -> str:
    """``<pid namespace>-<pid>-<start time>``: names this process, never another one."""
    st = read_stat(os.getpid())
    return f"{pid_namespace()}-{os.getpid()}-{st.starttime if st else 0}"


def owner_gone(owner: str) -> bool:
    """Whether ``owner`` (an :func:`owner_id`) names a process of this pid namespace that has
    exited. ``False`` when that cannot be known: another namespace's pids mean nothing here."""
    try:
        ns, pid, start = map(int, owner.split("-"))
    except ValueError:
        return False
    namespace = pid_namespace()
    if not namespace or ns != namespace:
        return False
    st = read_stat(pid)
    return st is None or st.starttime != start


def kill_commands(prefix: str | None = None) -> int:
    """SIGKILL the processes whose cookie starts with ``prefix`` (one manager's commands), or,
    without one, those whose cookie names a broker process that is gone. Never this process or
    its ancestors (a broker started by a command carries that command's cookie). Returns how
    many were signalled."""
    spared: set[int] = set()
    pid: int | None = os.getpid()
    while pid and pid not in spared:
        spared.add(pid)
        st = read_stat(pid)
        pid = st.ppid if st else None
    if prefix is not None:
        start = prefix.encode()

        def wanted(cookie: bytes) -> bool:
            return cookie.startswith(start)

    else:
        gone: dict[bytes, bool] = {}  # by owner: one check each

        def wanted(cookie: bytes) -> bool:
            m = _OWNED_COOKIE.match(cookie)
            if m is None:
                return False
            owner = m.group(1)
            if owner not in gone:
                gone[owner] = owner_gone(owner.decode())
            return gone[owner]

    killed = 0
    for pid in proc_pids():
        cookie = None if pid in spared else read_cookie(pid)
        if cookie is not None and wanted(cookie):
            # Checked again once the pidfd is open: the same process, still carrying it.
            killed += pidfd_signal(pid, signal.SIGKILL, lambda p, c=cookie: read_cookie(p) == c)
    return killed
