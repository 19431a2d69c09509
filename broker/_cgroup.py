"""Per-command cgroups: a cgroup v2 group per command for tracking and ``cgroup.kill``, plus limits.

Layout: the manager creates ``<own cgroup>/opsbroker-<pid namespace>-<pid>-<start time>-<token>``
in the cgroup v2 tree it runs in (``/sys/fs/cgroup`` or the hybrid ``/sys/fs/cgroup/unified``) and
one ``cmd-<n>`` child per command. The name says which process owns the group: a new manager
kills what still runs in the groups of owners that are gone (a broker killed with SIGKILL leaves
its commands and groups behind) and removes those groups, and a manager never closed removes its
own when the interpreter exits. The command's process is created inside its group (clone3 with
CLONE_INTO_CGROUP) or writes itself into ``cgroup.procs`` between fork and exec
(:mod:`broker._spawn`), so it cannot fork before it is tracked. ``cgroup.kill`` (Linux 5.14)
SIGKILLs every member at once, fork races included; ``cgroup.events`` says ``populated 0`` when
the tree is empty.

Limits (``pids.max``, memory) use the v2 controllers when the tree delegates them, else the v1
``pids`` and ``memory`` hierarchies of a hybrid host (groups of the same name there), which the
child enters through their ``tasks`` file (:meth:`CommandCgroup.spawn_fds` says why).

A finished command's groups are kept for the next command with the same limits (at most
:data:`POOL_MAX` of them): the kernel charges the first process created in a fresh group far more
than one created in a group used before, and that cost is paid while the broker's event loop
waits for the spawn (``scripts/bench.py spawn_cgroup`` measures both). A group is reused only
when it is empty: no member in v2 and, for a v1 ``pids`` group, nothing still charged to it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from ._proctree import owner_gone, owner_id

__all__ = ["CgroupTree", "CommandCgroup", "cgroup_kill"]

log = logging.getLogger(__name__)

RMDIR_RETRY_S = 0.5
"""How long to retry removing a group that the kernel still reports busy just after its last exit."""

POOL_MAX = 64
"""Empty command groups kept for reuse; more than this many finished at once are removed."""

PURGE_WAIT_S = 2.0
"""How long a purge waits for the processes it killed to be gone before removing their groups."""

_OWNED = re.compile(r"opsbroker-(\d+-\d+-\d+)-[0-9a-f]+\Z")


def _read(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # a fifth of the cost of open() in text mode
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode()
    finally:
        os.close(fd)


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def cgroup_kill(group: str) -> None:
    """SIGKILL every process in ``group`` (a cgroup v2 directory), atomically."""
    _write(os.path.join(group, "cgroup.kill"), "1")


def _mounts() -> list[tuple[str, str, str, str]]:
    """(mount root, mount point, fs type, super options) for each cgroup mount."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            parts = left.split()
            fstype, _source, options = ([*right.split(), "", ""])[:3]
            if fstype in ("cgroup", "cgroup2"):
                out.append((parts[3], parts[4], fstype, options))
    return out


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per hierarchy: key ``""`` for v2, else the v1 controller list."""
    paths = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _num, controllers, path = line.rstrip("\n").split(":", 2)
            paths[controllers] = path
    return paths


def _join(mount_root: str, mount_point: str, own: str) -> str | None:
    if not own.startswith(mount_root):
        return None
    rel = own[len(mount_root) :].lstrip("/")
    return os.path.join(mount_point, rel) if rel else mount_point


def _remove(path: str, *, wait: bool = True) -> bool:
    """Remove the group ``path``; whether it is gone. The kernel may report a group busy just
    after its last process exited: ``wait`` retries for up to :data:`RMDIR_RETRY_S` (blocking:
    start-up and shutdown only), else this returns ``False`` at once for a later try."""
    deadline = time.monotonic() + RMDIR_RETRY_S
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
            if not wait:
                return False
            time.sleep(0.005)


def _orphaned(name: str) -> bool:
    """Whether ``name`` is the group of a manager whose process is gone."""
    m = _OWNED.match(name)
    return m is not None and owner_gone(m.group(1))


def _purge(group: str, *, kill: bool) -> None:
    """Remove ``group`` and its command groups; with ``kill`` (v2), SIGKILL and wait out
    whatever still runs in them first. Best effort: what cannot be removed stays."""
    with contextlib.suppress(OSError):
        if kill and "populated 1" in _read(os.path.join(group, "cgroup.events")):
            cgroup_kill(group)
            deadline = time.monotonic() + PURGE_WAIT_S
            while "populated 1" in _read(os.path.join(group, "cgroup.events")):
                if time.monotonic() > deadline:
                    return
                time.sleep(0.005)
        for entry in os.scandir(group):
            if entry.is_dir(follow_symlinks=False):
                _remove(entry.path)
        _remove(group)


def _purge_orphans(base: str, *, kill: bool) -> None:
    """Purge the groups under ``base`` whose managers are gone."""
    try:
        names = [n for n in os.listdir(base) if n.startswith("opsbroker-")]
    except OSError:
        return
    for name in names:
        if _orphaned(name):
            log.info("cgroup: removing %s, left by a broker that is gone", name)
            _purge(os.path.join(base, name), kill=kill)


def _purge_at_exit(pid: int, path: str, v1_groups: list[str]) -> None:
    if os.getpid() == pid:  # not in a forked child
        _purge(path, kill=True)
        for group in v1_groups:
            _purge(group, kill=False)


@dataclass
class CommandCgroup:
    """One command's groups: ``path`` (v2, tracking and kill) and any v1 limit groups."""

    path: str
    rel: str
    limit_paths: list[str] = field(default_factory=list)
    limits: tuple[int | None, int | None] = (None, None)
    """The ``(pids_max, memory_max)`` it was made with: a pooled group serves the same again."""
    recycle: Callable[[CommandCgroup], bool] | None = None
    """Takes the group back for reuse (returns whether it did); set by its :class:`CgroupTree`."""
    _fds: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)
    """Files of the groups, opened once and kept while the groups exist (a pooled group serves
    many commands): checking or entering a group is then a ``pread`` or a write of a few
    microseconds, not a path walk and an open of tens."""

    def _file(self, group: str, name: str, flags: int) -> int:
        fd = self._fds.get((group, name))
        if fd is None:
            fd = self._fds[group, name] = os.open(os.path.join(group, name), flags | os.O_CLOEXEC)
        return fd

    def _pread(self, group: str, name: str) -> bytes:
        return os.pread(self._file(group, name, os.O_RDONLY), 256, 0)

    def spawn_fds(self) -> tuple[int, list[int]]:
        """What a child needs to enter the groups: the v2 group's directory (``O_PATH``: clone3
        creates the child in it) and each v1 limit group's ``tasks`` file (the child writes
        itself, its only thread, into it). The group owns them: they stay open until
        :meth:`remove`.

        ``tasks``, not ``cgroup.procs``: a thread that moves itself alone is moved without the
        kernel's threadgroup lock taken for writing, and that lock, unless another writer took it
        moments before, waits for an RCU grace period (5-25 ms on a VM), all the while the
        broker's event loop waits for the spawn (vfork). Commands that follow one another
        closely never showed it; an agent's, seconds apart, paid it at every start."""
        group_fd = self._file(self.path, "", os.O_PATH | os.O_DIRECTORY)
        tasks = [self._file(p, "tasks", os.O_WRONLY) for p in self.limit_paths]
        return group_fd, tasks

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in _read(os.path.join(self.path, "cgroup.procs")).split()]
        except OSError:
            return []

    def populated(self) -> bool:
        try:
            events = self._pread(self.path, "cgroup.events")
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ENODEV):
                return False  # removed: a group can only be removed once it is empty
            raise
        return b"populated 1" in events

    def contains(self, pid: int) -> bool:
        """Whether ``pid`` is a member now (read from ``/proc/<pid>/cgroup``)."""
        try:
            text = _read(f"/proc/{pid}/cgroup")
        except OSError:
            return False
        return any(line == f"0::{self.rel}" for line in text.splitlines())

    def kill(self) -> None:
        cgroup_kill(self.path)

    def remove(self, *, wait: bool = True) -> bool:
        """Close the groups' files and remove the groups; whether they are all gone (without
        ``wait``, one the kernel still reports busy is left for a later call)."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        return all([_remove(group, wait=wait) for group in (self.path, *self.limit_paths)])

    def release(self) -> None:
        """Hand the finished command's groups back to their tree (for reuse, or to remove them
        without blocking), else remove them."""
        if self.recycle is None or not self.recycle(self):
            self.remove()

    def reusable(self) -> bool:
        """Whether nothing is left in the groups: no v2 member, no v1 ``pids`` charge."""
        if self.populated():
            return False
        for group in self.limit_paths:
            try:
                current = self._pread(group, "pids.current")
            except FileNotFoundError:
                continue  # a memory group
            except OSError:
                return False
            if current.strip() != b"0":
                return False
        return True


def _removed(cmd: CommandCgroup) -> bool:
    """Try once more to remove a group that was busy; whether to stop trying."""
    try:
        return cmd.remove(wait=False)
    except OSError as e:
        log.warning("exec: could not remove cgroup %s: %s", cmd.path, e)
        return True


class CgroupTree:
    """The manager's own cgroup v2 group, under which each command gets a child group.

    Use :meth:`create`; it returns ``None`` where no writable cgroup v2 tree with ``cgroup.kill``
    exists (then the caller falls back to process groups and ``/proc`` sweeps).
    """

    def __init__(self, path: str, rel: str, v2_controllers: set[str], v1_groups: dict[str, str]):
        self.path = path
        self.rel = rel
        self._v2_controllers = v2_controllers
        self._v1_groups = v1_groups
        self._counter = 0
        self._pool: dict[tuple[int | None, int | None], list[CommandCgroup]] = {}
        self._pooled = 0
        self._busy: list[CommandCgroup] = []  # removed, but the kernel said busy: retried later
        # A manager that is never closed still kills its commands and removes its groups.
        self._at_exit = weakref.finalize(
            self, _purge_at_exit, os.getpid(), path, list(v1_groups.values())
        )

    @classmethod
    def create(cls) -> CgroupTree | None:
        try:
            mounts = _mounts()
            own = _own_paths()
        except OSError:
            return None
        name = f"opsbroker-{owner_id()}-{secrets.token_hex(4)}"
        for root, point, fstype, _opts in mounts:
            if fstype != "cgroup2" or "" not in own:
                continue
            base = _join(root, point, own[""])
            if base is None:
                continue
            _purge_orphans(base, kill=True)
            path = os.path.join(base, name)
            try:
                os.mkdir(path)
            except OSError:
                continue
            if not os.path.exists(os.path.join(path, "cgroup.kill")):
                os.rmdir(path)
                continue
            rel = os.path.join(own[""], name)
            controllers = cls._enable_v2_controllers(base, path)
            v1 = cls._make_v1_groups(mounts, own, name, skip=controllers)
            return cls(path, rel, controllers, v1)
        return None

    @staticmethod
    def _enable_v2_controllers(base: str, path: str) -> set[str]:
        enabled: set[str] = set()
        try:
            available = set(_read(os.path.join(path, "cgroup.controllers")).split())
        except OSError:
            return enabled
        for ctl in ("pids", "memory"):
            if ctl not in available:
                continue
            try:
                _write(os.path.join(path, "cgroup.subtree_control"), f"+{ctl}")
                enabled.add(ctl)
            except OSError:
                pass
        return enabled

    @staticmethod
    def _make_v1_groups(
        mounts: list[tuple[str, str, str, str]], own: dict[str, str], name: str, skip: set[str]
    ) -> dict[str, str]:
        groups: dict[str, str] = {}
        for root, point, fstype, opts in mounts:
            if fstype != "cgroup":
                continue
            for ctl in ("pids", "memory"):
                if ctl in skip or ctl in groups or ctl not in opts.split(","):
                    continue
                key = next((k for k in own if ctl in k.split(",")), None)
                base = _join(root, point, own[key]) if key is not None else None
                if base is None:
                    continue
                _purge_orphans(base, kill=False)  # their processes were killed through v2
                path = os.path.join(base, name)
                try:
                    os.mkdir(path)
                except OSError:
                    continue
                groups[ctl] = path
        return groups

    @property
    def limits(self) -> set[str]:
        """Which limits can be applied: a subset of ``{"pids", "memory"}``."""
        return self._v2_controllers | set(self._v1_groups)

    def new_command(self, *, pids_max: int | None, memory_max: int | None) -> CommandCgroup:
        """The groups for one command with the limits that are available: an empty pooled group
        made with the same limits, else new ones."""
        limits = (pids_max, memory_max)
        idle = self._pool.get(limits)
        if idle:
            self._pooled -= 1
            return idle.pop()
        self._counter += 1
        name = f"cmd-{self._counter}"
        cmd = CommandCgroup(
            os.path.join(self.path, name),
            os.path.join(self.rel, name),
            limits=limits,
            recycle=self._recycle,
        )
        os.mkdir(cmd.path)
        try:
            wanted = {"pids": pids_max, "memory": memory_max}
            for ctl, value in wanted.items():
                if value is None:
                    continue
                if ctl in self._v2_controllers:
                    limit_file = "pids.max" if ctl == "pids" else "memory.max"
                    _write(os.path.join(cmd.path, limit_file), str(value))
                elif ctl in self._v1_groups:
                    group = os.path.join(self._v1_groups[ctl], name)
                    os.mkdir(group)
                    cmd.limit_paths.append(group)
                    limit_file = "pids.max" if ctl == "pids" else "memory.limit_in_bytes"
                    _write(os.path.join(group, limit_file), str(value))
        except OSError:
            cmd.remove()
            raise
        return cmd

    def _recycle(self, cmd: CommandCgroup) -> bool:
        """Pool ``cmd`` for reuse, or remove it; a group the kernel still reports busy is
        retried at the next release instead of waited for (no sleep on a command's path)."""
        if self._at_exit.alive is False:
            return False
        self._busy = [busy for busy in self._busy if not _removed(busy)]
        if self._pooled < POOL_MAX and cmd.reusable():
            self._pool.setdefault(cmd.limits, []).append(cmd)
            self._pooled += 1
        elif not cmd.remove(wait=False):
            self._busy.append(cmd)
        return True

    def remove(self) -> None:
        """Remove the manager's groups (every command's groups must be released already)."""
        pooled = [cmd for idle in self._pool.values() for cmd in idle] + self._busy
        self._pool.clear()
        self._pooled = 0
        self._busy = []
        for cmd in pooled:
            with contextlib.suppress(OSError):
                cmd.remove()
        self._at_exit.detach()
        for group in (self.path, *self._v1_groups.values()):
            with contextlib.suppress(OSError):
                _remove(group)
