"""Tracking a command's tree through ``/proc``, where no writable cgroup v2 tree exists.

The broker becomes the child subreaper (orphans re-parent to it, not to init), each command
carries an environment cookie (``OPSBROKER_EXEC_ID``), and a ``/proc`` sweep finds the command's
session, the cookie holders and their descendants (:mod:`broker._proctree`). Signals go through
pidfds after a start-time check, so a reused pid is never signalled. A process that both leaves
the session and scrubs its environment is found only while its parent is a member (cgroups close
that gap). No per-command limits apply here.

Cookies name their manager: a new tracker kills what a broker that was killed left behind, and a
tracker never closed kills its own commands' leftovers when the interpreter exits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import weakref
from collections.abc import Callable, Mapping

from ._proctree import (
    ProcStat,
    is_child_subreaper,
    kill_commands,
    own_children,
    pidfd_signal,
    read_cookie,
    read_stat,
    set_child_subreaper,
    stats_since,
)
from ._tracker import Adopted, cookie_prefix, signal_group

__all__ = ["ProcCommandTree", "ProcTracker"]

log = logging.getLogger(__name__)

STALE_ZOMBIE_S = 5.0
"""A zombie child unreaped this long was adopted, not spawned (asyncio reaps within ms)."""


class ProcTracker:
    """Finds each command's processes by session, cookie and parentage, as the child subreaper."""

    cgroup_kill = False
    limits: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.subreaper = _Subreaper.acquire()
        self._cookie_prefix = cookie_prefix()
        self.trees: set[ProcCommandTree] = set()
        """The trees whose leader was spawned and that are not released yet."""
        self.stale_zombies: dict[tuple[int, int], float] = {}
        """Zombie children no command claims, by (pid, start time): when each was first seen."""
        killed = kill_commands()
        if killed:
            log.info("killed %d processes left by brokers that are gone", killed)
        self._leftovers: weakref.finalize[..., ProcTracker] | None = weakref.finalize(
            self, _kill_leftovers, os.getpid(), self._cookie_prefix
        )

    @property
    def cookie_prefix(self) -> str:
        return self._cookie_prefix

    def new_tree(self, cookie: str) -> ProcCommandTree:
        return ProcCommandTree(self, cookie)

    def close(self) -> None:
        if self._leftovers is not None:
            self._leftovers.detach()  # every command has ended
            self._leftovers = None
        if self.subreaper:
            self.subreaper = False
            _Subreaper.release()

    def leaders(self) -> set[int]:
        return {tree.leader for tree in self.trees}

    def reap_stale_zombies(self) -> None:
        """Reap zombie children nobody has reaped for ``STALE_ZOMBIE_S``.

        A ``setsid`` orphan that exits on its own before any sweep sees it alive becomes a zombie
        child of the broker (the subreaper) that no command can be matched to. asyncio and
        ``subprocess`` reap their own children within milliseconds, so a zombie child that has
        stayed unreaped this long is one the broker adopted.
        """
        now = time.monotonic()
        me = os.getpid()
        for key, first_seen in list(self.stale_zombies.items()):
            if now - first_seen < STALE_ZOMBIE_S:
                continue
            del self.stale_zombies[key]
            pid, start = key
            st = read_stat(pid)
            if st is not None and not st.alive and st.ppid == me and st.starttime == start:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)


class ProcCommandTree:
    """One command's tree: its session, its cookie holders and their descendants."""

    __slots__ = (
        "_adopted",
        "_known",
        "_leader_gone",
        "_pidfd",
        "_start",
        "_tracker",
        "cookie",
        "leader",
    )

    def __init__(self, tracker: ProcTracker, cookie: str) -> None:
        self._tracker = tracker
        self.cookie = cookie
        self.leader = 0
        self._pidfd: int | None = None
        self._start = 0
        self._known: dict[int, int] = {}
        self._leader_gone = False
        self._adopted = Adopted()

    def spawn_fds(self) -> tuple[int, list[int]]:
        return -1, []

    def started(self, leader: int, pidfd: int | None) -> None:
        self.leader = leader
        self._pidfd = pidfd
        st = read_stat(leader)
        self._start = st.starttime if st is not None else 0
        self._tracker.trees.add(self)

    def leader_exited(self) -> None:
        self._leader_gone = True

    def alive(self) -> bool:
        # While a member found by the last sweep is still alive, no new sweep is needed (a
        # sweep reads every process on the host); once they are all gone, one sweep confirms.
        for pid, start in self._known.items():
            st = read_stat(pid)
            if st is not None and st.starttime == start and st.alive:
                return True
        if self._leader_gone and self._tracker.subreaper:
            alive = self._orphans_alive()
            if alive is not None:
                return alive
        return any(st.alive for st in self._members().values())

    def signal(self, sig: int) -> None:
        """Send ``sig`` to every live member, each checked by start time once its pidfd is open.

        Members are listed (and remembered for reaping) before anything is signalled: a process
        that dies first would leave orphans the broker adopts without knowing them.
        """
        members = self._members()
        signal_group(self._pidfd, sig)
        for pid, st in members.items():
            if st.alive:
                pidfd_signal(pid, sig, _same_process(st))

    def members(self) -> list[int]:
        return sorted(self._members())

    async def release(self) -> None:
        try:
            await self._adopted.reap()
        finally:
            if self._tracker.stale_zombies:
                self._tracker.reap_stale_zombies()
            self._tracker.trees.discard(self)

    def discard(self) -> None:
        pass  # nothing was set up before the spawn

    def _orphans_alive(self) -> bool | None:
        """Whether the command left processes, from the broker's children alone, or ``None``
        when only a sweep can tell.

        Once the leader is reaped, the topmost live process of every branch of its tree is an
        orphan the broker (the subreaper) adopted: no such child means an empty tree. A child the
        command could own but that is not plainly its member (it left the session and dropped
        the cookie, yet may have children that did not), a zombie the command may have left (a
        sweep reaps it), or a list that changed while it was read, all need the sweep. Older
        zombies (adopted from an escaped process that died since) are left to the stale rule.
        """
        children = own_children()
        if children is None:
            return None
        me = os.getpid()
        leaders = self._tracker.leaders()
        cookie = self.cookie.encode()
        for pid in children:
            st = read_stat(pid)
            if st is None or st.ppid != me:
                return None  # reaped while the list was read, which may have skipped a child
            if pid in leaders:
                continue
            if st.starttime < self._start:  # older than the command: none of its own
                if not st.alive:
                    self._tracker.stale_zombies.setdefault((pid, st.starttime), time.monotonic())
                continue
            if not st.alive:
                return None  # a zombie, perhaps the command's: the sweep reaps it now
            if st.sid == self.leader or read_cookie(pid) == cookie:
                return True
            return None
        return False

    def _members(self) -> dict[int, ProcStat]:
        """The command's processes, by ``/proc``: its session, cookie holders, their descendants.

        Zombies among them that the broker adopted (subreaper) are reaped on the way.
        """
        me = os.getpid()
        cookie = self.cookie.encode()
        # Anything started before the leader cannot descend from the command.
        candidates = stats_since(self._start, exclude=(1, me))
        # As the subreaper, every member that left the session either still has a member as
        # parent (the closure below finds it) or was re-parented to the broker: only those need
        # their environment read (an environ read can wait on a busy process's memory lock).
        sub = self._tracker.subreaper
        members = {
            pid: st
            for pid, st in candidates.items()
            if st.sid == self.leader
            or pid == self.leader
            or (st.alive and (not sub or st.ppid == me) and read_cookie(pid) == cookie)
        }
        grew = True
        while grew:
            grew = False
            for pid, st in candidates.items():
                if pid not in members and st.ppid in members:
                    members[pid] = st
                    grew = True
        self._note_adopted(members)
        self._known = {pid: st.starttime for pid, st in members.items() if st.alive}
        leaders = self._tracker.leaders()
        for pid, st in candidates.items():
            if st.alive or st.ppid != me or pid in leaders:
                continue
            if pid in members:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
            elif sub:
                self._tracker.stale_zombies.setdefault((pid, st.starttime), time.monotonic())
        return members

    def _note_adopted(self, members: Mapping[int, ProcStat]) -> None:
        """Remember members (pid and start time) so that those the broker adopts can be reaped
        once they are zombies (only when it is a subreaper: else orphans go to init)."""
        if not self._tracker.subreaper and not is_child_subreaper():
            return
        for pid, st in members.items():
            if pid != self.leader:
                self._adopted.note(pid, st.starttime)


class _Subreaper:
    """The process-wide child-subreaper flag, held while any /proc tracker is open.

    Set by the first tracker and cleared by the last one to close (unless it was set before,
    e.g. by the embedder), so that a process that only briefly needs the fallback (a test run)
    does not adopt every orphan of its other children for the rest of its life.
    """

    holders = 0
    set_by_us = False

    @classmethod
    def acquire(cls) -> bool:
        if cls.holders == 0:
            if is_child_subreaper():
                cls.set_by_us = False
            elif set_child_subreaper(True):
                cls.set_by_us = True
            else:
                return False
        cls.holders += 1
        return True

    @classmethod
    def release(cls) -> None:
        cls.holders -= 1
        if cls.holders == 0 and cls.set_by_us:
            set_child_subreaper(False)
            cls.set_by_us = False


def _same_process(st: ProcStat) -> Callable[[int], bool]:
    """A check that ``pid`` is still the process ``st`` described (same start time)."""

    def check(pid: int) -> bool:
        now = read_stat(pid)
        return now is not None and now.starttime == st.starttime

    return check


def _kill_leftovers(pid: int, prefix: str) -> None:
    """A tracker never closed: kill what its commands left, at exit (not in a forked child)."""
    if os.getpid() == pid:
        kill_commands(prefix)
