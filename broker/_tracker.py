"""How the process manager finds a command's whole tree: the interface both trackers implement.

A :class:`Tracker` is chosen once per :class:`~broker._process.ProcessManager`:

- :class:`~broker._tracker_cgroup.CgroupTracker` where a writable cgroup v2 tree with
  ``cgroup.kill`` exists: one group per command, ``populated 0`` says the tree is empty, and
  ``pids.max`` and memory limits apply;
- :class:`~broker._tracker_proc.ProcTracker` elsewhere: the broker is the child subreaper, each
  command carries an environment cookie, and a ``/proc`` sweep finds its session, the cookie
  holders and their descendants.

Each command gets one :class:`Tree` from it. The manager's one kill path (SIGTERM, grace, SIGKILL
until empty) is written against :class:`Tree` alone, so it never asks which tracker it has.

Also here, shared by both: :class:`Adopted` (reaping the zombies the broker adopts from a command
when it is a subreaper) and :func:`signal_group` (the leader's process group, through its pidfd).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal as _signal
import time
from typing import Protocol

from ._proctree import PIDFD_SIGNAL_PROCESS_GROUP, owner_id, read_stat

__all__ = ["Adopted", "Tracker", "Tree", "cookie_prefix", "signal_group"]

REAP_SETTLE_S = 0.2
"""How long a killed member may take to become the broker's zombie (exit is not atomic)."""

POLL_FIRST_S = 0.0005
"""First delay between checks while waiting for killed processes (they usually go in 1 ms)."""


class Tree(Protocol):
    """One command's process tree, from just before its leader is spawned until it is empty."""

    @property
    def cookie(self) -> str:
        """The command's ``OPSBROKER_EXEC_ID`` value (names the command and its manager)."""
        ...

    def spawn_fds(self) -> tuple[int, list[int]]:
        """The fds the child needs to enter the tree before it execs: the cgroup v2 directory
        (``-1`` for none) and the v1 groups' ``tasks`` files. The tree owns them (the caller
        does not close them).

        Raises:
            OSError: a group could not be opened.
        """
        ...

    def started(self, leader: int, pidfd: int | None) -> None:
        """The leader (a direct child of the broker) was spawned; ``pidfd`` is its pidfd or
        ``None``, and stays open until :meth:`release`."""
        ...

    def leader_exited(self) -> None:
        """The leader has exited and been reaped (its pid may be reused from now on)."""
        ...

    def alive(self) -> bool:
        """Whether any process of the tree is still alive."""
        ...

    def signal(self, sig: int) -> None:
        """Send ``sig`` to every member (SIGKILL may use a faster, atomic kill)."""
        ...

    def members(self) -> list[int]:
        """The pids of the members now (for a log line about a tree that will not die)."""
        ...

    async def release(self) -> None:
        """Once the tree is empty: reap what the broker adopted from it and drop its group.

        **Cancellation:** it waits at most ``REAP_SETTLE_S``; the manager runs it to the end
        even when the command's caller is cancelled.
        """
        ...

    def discard(self) -> None:
        """The leader could not be spawned: undo what :meth:`Tracker.new_tree` set up."""
        ...


class Tracker(Protocol):
    """Makes a :class:`Tree` per command and says what it can enforce."""

    @property
    def cgroup_kill(self) -> bool:
        """Per-command cgroup v2 with ``cgroup.kill``."""
        ...

    @property
    def subreaper(self) -> bool:
        """The broker is the child subreaper: orphans re-parent to it."""
        ...

    @property
    def limits(self) -> frozenset[str]:
        """Per-command limits enforced: a subset of ``{"pids", "memory"}``."""
        ...

    @property
    def cookie_prefix(self) -> str:
        """What every cookie of this tracker starts with (see :func:`cookie_prefix`)."""
        ...

    def new_tree(self, cookie: str) -> Tree:
        """Set up the tree of the next command, named by ``cookie``.

        Raises:
            OSError: its cgroup could not be created or limited.
        """
        ...

    def close(self) -> None:
        """Release what the tracker holds (groups, the subreaper flag). Idempotent; every tree
        must be released first."""
        ...


def cookie_prefix() -> str:
    """A new tracker's cookie prefix: ``<owner_id()>-<token>.``, so that the commands left behind
    by a broker that was killed are found by the next one (:func:`~broker._proctree.kill_commands`)."""
    return f"{owner_id()}-{secrets.token_hex(4)}."


def signal_group(pidfd: int | None, sig: int) -> None:
    """Send ``sig`` to the leader's process group, race-free through its pidfd (Linux 6.9)."""
    if pidfd is not None:
        with contextlib.suppress(OSError):
            _signal.pidfd_send_signal(pidfd, sig, None, PIDFD_SIGNAL_PROCESS_GROUP)


class Adopted:
    """Members remembered by pid and start time, so that those the broker adopts (as subreaper:
    their parent died, often in the same kill) are reaped once they are zombies."""

    __slots__ = ("_members",)

    def __init__(self) -> None:
        self._members: dict[int, int] = {}

    def note(self, pid: int, starttime: int) -> None:
        self._members[pid] = starttime

    async def reap(self) -> None:
        """Reap the zombies the broker adopted from this command, and only those (never a pid
        that asyncio or other code spawned: each is checked by pid, start time and parent).

        A killed tree is empty (``populated 0``) slightly before its processes are zombies and
        their orphans re-parented, so this waits up to ``REAP_SETTLE_S`` for each recorded
        member to be gone or be the broker's zombie.
        """
        me = os.getpid()
        pending = dict(self._members)
        deadline = time.monotonic() + REAP_SETTLE_S
        while pending:
            for pid, start in list(pending.items()):
                st = read_stat(pid)
                if st is None or st.starttime != start:
                    del pending[pid]  # gone (reaped by its own parent)
                elif not st.alive and st.ppid == me:
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222 (a zombie: never blocks)
                    del pending[pid]
            if not pending or time.monotonic() > deadline:
                return
            await asyncio.sleep(POLL_FIRST_S)
