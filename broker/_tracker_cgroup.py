"""Tracking a command's tree by its cgroup: one cgroup v2 group per command (``broker._cgroup``).

The child enters its group between fork and exec (:mod:`broker._spawn`), so nothing it forks is
untracked; ``cgroup.events`` says ``populated 0`` when the tree is empty and ``cgroup.kill``
SIGKILLs every member at once, fork races included. ``pids.max`` and memory limits apply here.
"""

from __future__ import annotations

import contextlib
import logging
import signal as _signal

from ._cgroup import CgroupTree, CommandCgroup
from ._proctree import is_child_subreaper, pidfd_signal, read_stat
from ._tracker import Adopted, cookie_prefix, signal_group

__all__ = ["CgroupCommandTree", "CgroupTracker"]

log = logging.getLogger(__name__)


class CgroupTracker:
    """Gives each command its own cgroup, limited by ``pids_max`` and ``memory_max``.

    Use :meth:`create`; it returns ``None`` where no writable cgroup v2 tree with ``cgroup.kill``
    exists.
    """

    cgroup_kill = True
    subreaper = False

    def __init__(self, cgroups: CgroupTree, *, pids_max: int | None, memory_max: int | None):
        self.cgroups: CgroupTree | None = cgroups
        self._pids_max = pids_max
        self._memory_max = memory_max
        self._limits = frozenset(cgroups.limits)
        self._cookie_prefix = cookie_prefix()

    @classmethod
    def create(cls, *, pids_max: int | None, memory_max: int | None) -> CgroupTracker | None:
        cgroups = CgroupTree.create()
        if cgroups is None:
            return None
        return cls(cgroups, pids_max=pids_max, memory_max=memory_max)

    @property
    def limits(self) -> frozenset[str]:
        return self._limits

    @property
    def cookie_prefix(self) -> str:
        return self._cookie_prefix

    def new_tree(self, cookie: str) -> CgroupCommandTree:
        if self.cgroups is None:
            raise OSError("the cgroup tracker is closed")
        group = self.cgroups.new_command(pids_max=self._pids_max, memory_max=self._memory_max)
        return CgroupCommandTree(group, cookie)

    def close(self) -> None:
        if self.cgroups is not None:
            self.cgroups.remove()
            self.cgroups = None


class CgroupCommandTree:
    """One command's tree: the members of its cgroup."""

    __slots__ = ("_adopted", "_leader", "_pidfd", "cookie", "group")

    def __init__(self, group: CommandCgroup, cookie: str) -> None:
        self.group = group
        self.cookie = cookie
        self._leader = 0
        self._pidfd: int | None = None
        self._adopted = Adopted()

    def spawn_fds(self) -> tuple[int, list[int]]:
        return self.group.spawn_fds()

    def started(self, leader: int, pidfd: int | None) -> None:
        self._leader = leader
        self._pidfd = pidfd

    def leader_exited(self) -> None:
        pass  # membership is the group's: a reused pid is never a member

    def alive(self) -> bool:
        return self.group.populated()

    def signal(self, sig: int) -> None:
        """Send ``sig`` to every member; SIGKILL is one write to ``cgroup.kill``.

        Members are listed (and remembered for reaping) before anything is signalled: a process
        that dies first would leave orphans the broker adopts without knowing them.
        """
        pids = self.group.pids()
        if is_child_subreaper():  # set by the embedder: orphans of the kill come to us
            for pid in pids:
                st = read_stat(pid)
                if st is not None and pid != self._leader:
                    self._adopted.note(pid, st.starttime)
        signal_group(self._pidfd, sig)
        if sig == _signal.SIGKILL:
            with contextlib.suppress(OSError):
                self.group.kill()
            return
        for pid in pids:
            pidfd_signal(pid, sig, self.group.contains)

    def members(self) -> list[int]:
        return self.group.pids()

    async def release(self) -> None:
        try:
            await self._adopted.reap()
        finally:
            try:
                self.group.release()
            except OSError as e:
                log.warning("exec: could not remove cgroup %s: %s", self.group.path, e)

    def discard(self) -> None:
        self.group.remove()
