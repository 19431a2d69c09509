"""``ProcessOperations``: commands that outlive the call that started them.

A dev server, a watcher or a REPL is *started* and gets a stable id; it lives in the backend (on a
broker: in the broker, not in a connection), so a client that went away can come back, *attach*
and replay what the process wrote, then follow it live. Its output is kept in a bounded ring; an
attach from an offset the ring no longer holds says how many bytes were dropped, never silently
(a process started with ``backpressure`` waits for its attachers instead, losing nothing).
Every guarantee of ``exec`` holds: the cwd is confined, the environment is the policy's, the tree
is tracked and killed as one (``kill``, the timeout, the idle timeout and broker shutdown take the
one kill path), and the audit records start, attach, stdin, signals and the exit.

Offsets count every byte of output the process produced, in arrival order (stdout and stderr
together; a PTY has one stream), from 0; they only grow.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ._types import KillReason

if TYPE_CHECKING:
    from ._gate import Gate

__all__ = [
    "GatedProcessOperations",
    "ProcessInfo",
    "ProcessOperations",
    "ProcessOutput",
    "ProcessState",
    "PtySize",
    "RingReaders",
    "Stream",
]


class ProcessState(enum.Enum):
    """Where a started process is in its life."""

    RUNNING = "running"
    EXITED = "exited"  # ended on its own: ``exit_code`` says how
    KILLED = "killed"  # the backend killed the tree: ``kill_reason`` says why


class Stream(enum.Enum):
    """Which output a chunk came from (a PTY merges both into ``STDOUT``)."""

    STDOUT = "stdout"
    STDERR = "stderr"


@dataclass(frozen=True, slots=True)
class PtySize:
    """A terminal's size in character cells."""

    cols: int
    rows: int


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """What is known of a started process (a snapshot).

    ``started_at`` is seconds since the epoch; ``bytes_out`` counts all output produced so far
    (the next offset). Once it has ``EXITED``, ``exit_code`` is its leader's exit status, or
    ``None`` when a signal (``signal``) ended the leader: the rule of
    :class:`~operations.ExecResult`. ``kill_reason`` is set once it was ``KILLED``.
    """

    id: str
    command: str
    cwd: str
    state: ProcessState
    started_at: float
    pty: PtySize | None = None
    exit_code: int | None = None
    kill_reason: KillReason | None = None
    bytes_out: int = 0
    signal: int | None = None

    @property
    def running(self) -> bool:
        return self.state is ProcessState.RUNNING


@dataclass(frozen=True, slots=True)
class ProcessOutput:
    """A piece of a process's output: ``data`` starts at ``offset``.

    ``dropped`` is the number of bytes between the offset the caller asked for (or the end of
    the previous piece) and this one that the ring no longer held.
    """

    offset: int
    data: bytes
    stream: Stream = Stream.STDOUT
    dropped: int = 0


class _Span(Protocol):
    @property
    def start(self) -> int: ...

    @property
    def end(self) -> int: ...


class RingReaders:
    """Where each attacher of a process's output ring reads next: what a ring with
    backpressure (``start(backpressure=True)``) may not drop. The rule every backend's ring
    follows."""

    def __init__(self) -> None:
        self._next: dict[object, int] = {}
        self._moved = asyncio.Event()
        self.waiting = 0
        """Outputs waiting in :meth:`room` now: a process held so has output, it is not idle."""

    def advance(self, reader: object, offset: int) -> None:
        """``reader`` reads next at ``offset``."""
        self._next[reader] = offset
        self._moved.set()

    def leave(self, reader: object) -> None:
        """``reader`` reads no more."""
        self._next.pop(reader, None)
        self._moved.set()

    async def room(self, ring: _Span, size: int, capacity: int) -> None:
        """Wait until ``size`` more bytes fit in ``ring`` (``capacity`` bytes) beside what its
        readers have yet to read (everything it holds, while no reader follows). A chunk
        larger than the ring waits until every byte held has been read."""
        while True:
            unread = ring.end - max(min(self._next.values(), default=0), ring.start)
            if not unread or unread + size <= capacity:
                return
            self._moved.clear()
            self.waiting += 1
            try:
                await self._moved.wait()
            finally:
                self.waiting -= 1


@runtime_checkable
class ProcessOperations(Protocol):
    """Start, attach to, feed, signal and kill processes that outlive a call.

    Every method that takes an ``id`` raises :class:`~operations.NotFound` for an id the caller
    does not own or that is no longer retained.
    """

    async def start(
        self,
        command: str,
        cwd: str,
        *,
        env: Mapping[str, str] | None = None,
        pty: PtySize | None = None,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        backpressure: bool = False,
    ) -> ProcessInfo:
        """Start ``command`` through the shell in ``cwd`` and return at once, running.

        ``pty`` gives it a pseudo-terminal of that size (stdin, stdout and stderr; one output
        stream). ``timeout`` bounds its lifetime and ``idle_timeout`` the time it may go without
        producing output, in seconds (the policy's limits apply and may be lower).

        With ``backpressure`` the process waits for its attachers instead of losing output, as
        a program writing to a pipe waits for its reader: the ring drops only bytes that every
        attacher has read (none while no one is attached), and while it is full the process's
        writes block. Time spent so is not idle. For a process that one stream owns (a terminal
        session, a command whose whole output a client relays); without it a slow attacher
        never slows the process and is told what it missed.

        Raises:
            InvalidArgument: a bad timeout, size or command. PolicyDenied: the policy refuses the
                command or the caller has as many processes as it may. NotFound / EscapesRoot:
                the cwd.
        """
        ...

    def attach(self, id: str, *, from_offset: int = 0) -> AsyncIterator[ProcessOutput]:
        """Replay the output from ``from_offset`` and follow it live; the iteration ends once the
        process has ended and every byte it produced has been delivered.

        Closing the iterator (or cancelling the task iterating it) detaches: the process goes on.
        """
        ...

    async def write_stdin(self, id: str, data: bytes) -> None:
        """Write ``data`` to the process's stdin (waits while its pipe or terminal is full).

        Raises:
            InvalidArgument: stdin was closed, or the process has ended.
        """
        ...

    async def close_stdin(self, id: str) -> None:
        """Close the process's stdin (end of input: ``cat`` then exits). Idempotent."""
        ...

    async def signal(self, id: str, signal: int) -> None:
        """Send ``signal`` (``signal.SIGINT``, ``SIGTERM``, ...) to the process's group.

        Raises:
            InvalidArgument: not a signal number.
        """
        ...

    async def resize(self, id: str, cols: int, rows: int) -> None:
        """Set the terminal size of a process started with a PTY (it gets ``SIGWINCH``).

        Raises:
            InvalidArgument: the process has no PTY, or the size is not positive.
        """
        ...

    async def list_processes(self) -> list[ProcessInfo]:
        """The caller's processes, running and retained finished ones, oldest first."""
        ...

    async def wait(self, id: str) -> ProcessInfo:
        """Wait until the process has ended; return its final record.

        **Cancellation:** cancelling the wait leaves the process running.
        """
        ...

    async def kill(self, id: str) -> ProcessInfo:
        """Kill the process's whole tree (``kill_reason`` ``KILLED``) and return its final record;
        a process that already ended is returned as it is."""
        ...


class GatedProcessOperations(Protocol):
    """:class:`ProcessOperations` of a backend that decides policy itself (the broker core, the
    memory backend), as :class:`~operations.GuardedBackend` calls them.

    Every method takes the caller's ``owner`` (its principal): a process is seen, attached to,
    fed, signalled and killed only by its owner, and the per-principal limit counts by it
    (``None``: an embedder's own calls, which see every process). ``start`` takes the call's
    :class:`~operations.Gate`, asked with the cwd it opened (``gate.read``).
    """

    async def start(
        self,
        command: str,
        cwd: str,
        *,
        env: Mapping[str, str] | None = None,
        pty: PtySize | None = None,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        backpressure: bool = False,
        owner: str | None = None,
        gate: Gate | None = None,
    ) -> ProcessInfo: ...

    def attach(
        self, id: str, *, from_offset: int = 0, owner: str | None = None
    ) -> AsyncIterator[ProcessOutput]: ...

    async def write_stdin(self, id: str, data: bytes, *, owner: str | None = None) -> None: ...

    async def close_stdin(self, id: str, *, owner: str | None = None) -> None: ...

    async def signal(self, id: str, signal: int, *, owner: str | None = None) -> None: ...

    async def resize(self, id: str, cols: int, rows: int, *, owner: str | None = None) -> None: ...

    async def list_processes(self, *, owner: str | None = None) -> list[ProcessInfo]: ...

    async def wait(self, id: str, *, owner: str | None = None) -> ProcessInfo: ...

    async def kill(self, id: str, *, owner: str | None = None) -> ProcessInfo: ...
