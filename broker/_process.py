"""Running commands: one process tree per command, streamed output, and one kill path.

Every command runs in a new session and process group, with stdin at ``/dev/null`` and stdout and
stderr merged into one pipe that is read in bounded chunks and handed to ``on_data`` as it comes
(awaiting it when it returns an awaitable, so a slow consumer slows the command instead of growing
the broker's memory).

The tree is tracked so that ``setsid`` and double forks cannot escape, by one of two trackers
behind one interface (:mod:`broker._tracker`), chosen once per manager:

- **cgroup mode** (a writable cgroup v2 tree with ``cgroup.kill``, :mod:`broker._tracker_cgroup`):
  each command gets its own cgroup, entered by the child itself between fork and exec; the tree
  is empty when ``cgroup.events`` says ``populated 0``. ``pids.max`` and memory limits apply here.
- **fallback** (:mod:`broker._tracker_proc`): the broker becomes the child subreaper, each command
  carries an environment cookie (``OPSBROKER_EXEC_ID``), and a ``/proc`` sweep finds the command's
  session, the cookie holders and their descendants (:mod:`broker._proctree`).

Where the kernel has Landlock signal scoping (Linux 6.12) the command cannot signal anything
outside its own tree, so ``kill $PPID`` fails; the new session already keeps ``kill 0``, ``kill
-$PPID`` of an unrelated group and terminal signals away, but not a direct ``kill $PPID``. With a
``sandbox`` (the policy's Landlock command sandbox, :class:`~broker._landlock.Sandbox`) the
command's domain also confines the filesystem: it writes only under the root and its private
temp directory (``TMPDIR``), and the sandbox scopes signals itself.

Spawning goes through :mod:`broker._spawn` (C, vfork): between fork and exec the child, using
system calls only, writes itself into the command's cgroups, starts a new session, takes its
stdio, enters the working directory by fd and its own new Landlock domain, then execs. So the
command cannot fork untracked, runs scoped from its first instruction, and nothing in the broker
enters its domain; there is no trampoline and no extra thread per command.

Timeout, abort (signal or task cancellation), output limit and shutdown take the same path:
SIGTERM (and SIGCONT, so a stopped process can act on it), ``kill_grace`` seconds, then SIGKILL of
the whole tree, a wait until the tree is empty, and the pipe closed from the broker's side so a
descendant that kept stdout cannot hang the call. The result then has ``exit_code=None`` and the
reason. When the shell exits on its own, output is read until it has been idle for ``idle_grace``
(re-armed on every chunk, as the reference's ``waitForChildProcess``; the time ``on_data`` takes
with a chunk is not idle), then whatever is still running in the tree is killed the same way: no
background process outlives its command.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import inspect
import itertools
import logging
import os
import signal as _signal
import struct
import termios
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from operations import (
    AbortSignal,
    ExecResult,
    InvalidArgument,
    KillReason,
    NotFound,
    OnData,
    OpsError,
    PermissionDenied,
    Unavailable,
    check_timeout,
)

from ._landlock import Ruleset, Sandbox
from ._proctree import COOKIE_VAR, has_pidfd
from ._signal_scope import signal_scope
from ._tracker import POLL_FIRST_S, Tracker, Tree, signal_group
from ._tracker_cgroup import CgroupTracker
from ._tracker_proc import ProcTracker

try:
    from . import _spawn as _native
except ImportError:  # a source tree that was never built; commands then fail with NATIVE_MISSING
    _native = None  # type: ignore[assignment]

__all__ = ["LiveProcess", "ProcessCapabilities", "ProcessManager", "set_winsize"]

log = logging.getLogger(__name__)
T = TypeVar("T")

KILL_GRACE_S = 1.0
"""SIGTERM -> SIGKILL: time for a well-behaved tool to clean up, short enough to return promptly."""

IDLE_GRACE_S = 0.1
"""After the shell exits, stop reading once output has been idle this long (reference: 100 ms)."""

READ_CHUNK = 256 * 1024
"""Bytes read from the pipe at a time: the most output the broker holds for one command."""

LIVE_READ_CHUNK = 64 * 1024
"""Bytes read at a time for a process that outlives a call, whose chunks are *kept* (in its
output ring): ``os.read`` allocates the whole size and shrinks it to what came, and many kept
chunks shrunk from 256 KiB fragment the heap (about 3x the rings' size in RSS, against 1x)."""

PIPE_SIZE = 1024 * 1024
"""Kernel pipe buffer for the output pipe: fewer wake-ups for fast producers (Linux, best effort)."""

_F_SETPIPE_SZ = 1031

EMPTY_TREE_LIMIT_S = 10.0
"""After SIGKILL, how long to keep killing before reporting a tree that will not die (D state)."""

POLL_MAX_S = 0.02
"""Tree-empty polling: start fast (``POLL_FIRST_S``: a killed tree usually empties in a
millisecond), back off to this."""

MINIMAL_ENV: Mapping[str, str] = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}
"""Environment when the caller passes none: never the broker's own (it may hold secrets)."""


@dataclass(frozen=True, slots=True)
class ProcessCapabilities:
    """How this manager tracks and confines process trees on this host."""

    cgroup_kill: bool
    """Per-command cgroup v2 with ``cgroup.kill`` (else process groups and ``/proc`` sweeps)."""
    pidfd: bool
    """Signals and exit waits go through pidfds (no pid-reuse races)."""
    subreaper: bool
    """The broker is the child subreaper (fallback mode): orphans re-parent to it."""
    signal_scope: bool
    """Landlock signal scoping: commands cannot signal the broker or other commands."""
    sandbox: bool = False
    """The Landlock command sandbox: commands write only under the root and a private temp dir."""
    limits: frozenset[str] = frozenset()
    """Per-command limits that can be enforced: a subset of ``{"pids", "memory"}``."""
    pids_max: int | None = None
    """The ``pids.max`` every command runs under; ``None`` when none is enforced."""
    memory_max: int | None = None
    """The memory limit (bytes) every command runs under; ``None`` when none is enforced."""


@dataclass(eq=False)
class _Run:
    """One running command: its leader, output fds, tree and why (if) it is being killed."""

    leader: _Leader
    read_fds: list[int]
    pidfd: int | None
    tree: Tree
    kill_reason: KillReason | None = None
    killed: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    """Done once a kill is requested."""
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    last_activity: float = 0.0
    delivering: int = 0
    """Output pumps inside ``on_data`` now: a consumer holding the output is not quiet output."""
    read_chunk: int = READ_CHUNK

    @property
    def pid(self) -> int:
        return self.leader.pid

    def request_kill(self, reason: KillReason) -> None:
        """Ask for the tree to be killed; the first reason wins."""
        if self.kill_reason is None:
            self.kill_reason = reason
            self.killed.set_result(None)


class _Leader:
    """The command's first process, a direct child of the broker, reaped by pid."""

    __slots__ = ("pid", "returncode")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def wait(self) -> int | None:
        """Block until it exits and reap it; the exit code, or ``-signal`` if a signal ended it."""
        if self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
            except ChildProcessError:  # reaped elsewhere: the status is lost
                log.warning("exec: pid %d was reaped by someone else", self.pid)
                return None
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


@dataclass(eq=False)
class _Stdio:
    """The fds of one spawn: the child's stdin, stdout and stderr (closed in the broker once it
    has them) and the broker's ends (output to read, stdin to write, ``-1`` for none)."""

    child: tuple[int, int, int]
    close_after: list[int]
    read_fds: list[int]
    stdin: int = -1
    tty: bool = False

    @classmethod
    def merged(cls, devnull: int) -> _Stdio:
        """``exec``: stdin at ``/dev/null``, stdout and stderr into one pipe."""
        read_fd, write_fd = os.pipe()
        with contextlib.suppress(OSError):
            fcntl.fcntl(read_fd, _F_SETPIPE_SZ, PIPE_SIZE)
        return cls((devnull, write_fd, write_fd), [write_fd], [read_fd])

    @classmethod
    def pipes(cls) -> _Stdio:
        """A long-lived process: a stdin pipe, and stdout and stderr apart."""
        fds: list[int] = []
        try:
            for _ in range(3):
                fds += os.pipe()
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        in_r, in_w, out_r, out_w, err_r, err_w = fds
        with contextlib.suppress(OSError):
            fcntl.fcntl(out_r, _F_SETPIPE_SZ, PIPE_SIZE)
        return cls((in_r, out_w, err_w), [in_r, out_w, err_w], [out_r, err_r], in_w)

    @classmethod
    def terminal(cls, cols: int, rows: int) -> _Stdio:
        """A long-lived process on a new pseudo-terminal of ``cols`` x ``rows`` (its size set
        before the child starts); the broker reads and writes the master side."""
        master, slave = os.openpty()
        try:
            set_winsize(slave, cols, rows)
            writer = os.dup(master)
        except BaseException:
            os.close(master)
            os.close(slave)
            raise
        return cls((slave, slave, slave), [slave], [master], writer, tty=True)

    def close_child(self) -> None:
        for fd in self.close_after:
            os.close(fd)
        self.close_after = []

    def close_parent(self) -> None:
        for fd in (*self.read_fds, self.stdin):
            if fd >= 0:
                os.close(fd)
        self.read_fds, self.stdin = [], -1


def set_winsize(fd: int, cols: int, rows: int) -> None:
    """Set the window size of the terminal ``fd`` (its foreground group gets ``SIGWINCH``)."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class LiveProcess:
    """A tree started by :meth:`ProcessManager.start`: it outlives the call that started it.

    The owner runs :meth:`supervise` (the output pump and the one kill path) and owns
    :attr:`stdin_fd` (non-blocking; for a PTY, a second fd on the terminal's master side).
    """

    __slots__ = ("_manager", "_run", "stdin_fd", "tty")

    def __init__(self, manager: ProcessManager, run: _Run, stdin_fd: int, *, tty: bool) -> None:
        self._manager = manager
        self._run = run
        self.stdin_fd = stdin_fd
        self.tty = tty

    @property
    def pid(self) -> int:
        return self._run.pid

    @property
    def read_fds(self) -> list[int]:
        """The output fds: ``[stdout, stderr]`` for pipes, ``[master]`` for a PTY."""
        return list(self._run.read_fds)

    @property
    def returncode(self) -> int | None:
        """The leader's exit status once reaped (``-signal`` if a signal ended it)."""
        return self._run.leader.returncode

    def kill(self, reason: KillReason) -> None:
        """Ask for the tree to be killed (the first reason wins); :meth:`supervise` returns."""
        self._run.request_kill(reason)

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the leader's process group and, on a PTY, to the terminal's
        foreground group too (a job an interactive shell started)."""
        run = self._run
        if run.leader.returncode is not None:
            return  # reaped: its pid (and group id) may name someone else now
        if run.pidfd is not None:
            signal_group(run.pidfd, sig)
        else:
            with contextlib.suppress(OSError):
                os.killpg(run.pid, sig)
        if self.tty and run.read_fds:
            with contextlib.suppress(OSError):
                group = os.tcgetpgrp(run.read_fds[0])
                if group > 0 and group != run.pid:
                    os.killpg(group, sig)

    async def supervise(self, readers: Sequence[tuple[int, OnData]]) -> ExecResult:
        """Pump each output fd to its callback until the tree has ended, then release it.

        As :meth:`ProcessManager.exec`: ``ExecResult(code)`` (or ``signal``) when the leader exited (and the
        rest of the tree was killed after its output went idle), ``ExecResult(None, reason)``
        when it was killed. **Cancellation** kills the tree (``ABORTED``) first.
        """
        run = self._run
        try:
            return await self._manager._supervise(run, readers)
        finally:
            self._manager._runs.discard(run)
            run.finished.set()


NATIVE_MISSING = (
    "Cannot run a command: the native spawner (broker._spawn) is not built. Reinstall opsbroker "
    "on Linux with a C compiler and the Python headers (pip install .)."
)


def _encode_env(env: Mapping[str, str]) -> list[bytes]:
    out = []
    for key, value in env.items():
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise InvalidArgument("exec", None, f"invalid environment variable {key!r}")
        out.append(os.fsencode(f"{key}={value}"))
    return out


@functools.lru_cache(maxsize=64)
def _executables(program: str, path: str | None) -> tuple[bytes, ...]:
    """Where to look for ``program``: itself if it has a ``/``, else each entry of the
    command's ``PATH``, as ``execvpe`` and ``subprocess`` do (cached: few distinct ones)."""
    name = os.fsencode(program)
    if b"/" in name:
        return (name,)
    env = {} if path is None else {"PATH": path}
    return tuple(os.path.join(os.fsencode(d or "."), name) for d in os.get_exec_path(env))


def _fd_path(fd: int, default: str) -> str:
    """The path the kernel names for what ``fd`` holds (``default`` if it names none)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return default


def _spawn_error(e: BaseException, argv: Sequence[str], cwd: str) -> BaseException:
    """The error for a command that could not start, named by the step that failed."""
    if isinstance(e, OpsError) or not isinstance(e, OSError | ValueError):
        return e
    if isinstance(e, ValueError):
        return InvalidArgument("exec", argv[0], str(e))
    step, reason = e.filename, e.strerror or str(e)
    if step == "exec":
        if isinstance(e, FileNotFoundError):
            return NotFound("exec", argv[0], "program not found")
        if isinstance(e, PermissionError):
            return PermissionDenied("exec", argv[0], reason)
    if step in ("cwd", cwd):
        if isinstance(e, FileNotFoundError | NotADirectoryError):
            return NotFound("exec", cwd, "working directory does not exist")
        if isinstance(e, PermissionError):
            return PermissionDenied("exec", cwd, reason)
    return Unavailable("exec", cwd, f"could not start the command ({step or 'spawn'}): {reason}")


async def readable(fd: int) -> None:
    """Wait until ``fd`` is readable (a pipe with data or at EOF, a pidfd whose process exited)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_reader(fd, ready)
    try:
        await fut
    finally:
        loop.remove_reader(fd)


async def _run_to_end(coro: Coroutine[Any, Any, T]) -> tuple[T, bool]:
    """Run ``coro`` to completion even if the caller is cancelled meanwhile.

    Returns its result and whether a cancellation arrived (the caller re-raises it after).
    """
    task = asyncio.ensure_future(coro)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            return result, cancelled
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True


class ProcessManager:
    """Runs commands as tracked process trees and kills them, whole, for any reason.

    Args:
        kill_grace: seconds between SIGTERM and SIGKILL.
        idle_grace: after the shell exits, seconds of output silence before the call returns.
        use_cgroups: ``True`` requires a cgroup v2 tree with ``cgroup.kill``, ``False`` forces the
            fallback (process groups, subreaper, ``/proc`` sweep), ``None`` detects.
        pids_max: per-command ``pids.max`` (bounds fork bombs); needs cgroups, else ignored
            (``capabilities().limits`` says what is enforced).
        memory_max: per-command memory limit in bytes; needs cgroups, else ignored.
        scope_signals: Landlock signal scoping for commands; ``None`` uses it where available.
            A ``sandbox`` brings its own (ABI >= 6) and is used in its place.
        sandbox: the Landlock ruleset every command runs in (the policy's
            :class:`~broker._landlock.Sandbox`, or any :class:`~broker._landlock.Ruleset`), or
            ``None``. A :class:`~broker._landlock.Sandbox` also sets ``TMPDIR``, ``TMP`` and
            ``TEMP`` to its private temp directory. The caller owns it (closes it after
            :meth:`aclose`); a closed one makes every command fail to start, never run bare.
        background_ttl: reserved for a policy that lets background processes outlive their
            command for a time to live; only ``None`` (kill them when the command ends) is
            implemented today.
    """

    def __init__(
        self,
        *,
        kill_grace: float = KILL_GRACE_S,
        idle_grace: float = IDLE_GRACE_S,
        use_cgroups: bool | None = None,
        pids_max: int | None = None,
        memory_max: int | None = None,
        scope_signals: bool | None = None,
        background_ttl: float | None = None,
        sandbox: Ruleset | None = None,
    ) -> None:
        if background_ttl is not None:
            raise ValueError("background_ttl is not supported yet: background processes are killed")
        if kill_grace < 0 or idle_grace < 0:
            raise ValueError(f"grace periods must be non-negative, got {kill_grace}, {idle_grace}")
        self._kill_grace = kill_grace
        self._idle_grace = idle_grace
        self._pids_max = pids_max
        self._memory_max = memory_max
        self._runs: set[_Run] = set()
        self._command_ids = itertools.count(1)  # a cookie's last part (its prefix is random)
        self._null_fd = -1
        self._closing = False
        self._pidfd = has_pidfd()
        tracker: Tracker | None = None
        if use_cgroups is not False:
            tracker = CgroupTracker.create(pids_max=pids_max, memory_max=memory_max)
            if tracker is None and use_cgroups:
                raise Unavailable(
                    "exec", None, "no writable cgroup v2 tree with cgroup.kill on this host"
                )
        self._tracker: Tracker = tracker if tracker is not None else ProcTracker()
        self._sandbox = sandbox
        self._sandbox_env = sandbox.env() if isinstance(sandbox, Sandbox) else {}
        # The environment of a command that brings none, encoded once (its cookie comes last).
        self._default_env = {**MINIMAL_ENV, **self._sandbox_env}
        self._default_environ = _encode_env(self._default_env)
        self._last_env: tuple[dict[str, str], dict[str, str], list[bytes]] | None = None
        self._own_scope: Ruleset | None = None
        if sandbox is None and scope_signals is not False:
            self._own_scope = signal_scope()
        self._scope = sandbox if sandbox is not None else self._own_scope
        scoped = self._scope is not None and self._scope.signal_scoping
        if scope_signals and not scoped:
            self._close_resources()
            raise Unavailable("exec", None, "Landlock signal scoping is not available")

    def capabilities(self) -> ProcessCapabilities:
        """What this manager uses on this host (cgroup kill, pidfds, subreaper, signal scope) and
        the per-command limits it enforces (a limit asked for but not enforceable is ``None``)."""
        limits = self._tracker.limits
        return ProcessCapabilities(
            cgroup_kill=self._tracker.cgroup_kill,
            pidfd=self._pidfd,
            subreaper=self._tracker.subreaper,
            signal_scope=self._scope is not None and self._scope.signal_scoping,
            sandbox=self._sandbox is not None,
            limits=limits,
            pids_max=self._pids_max if "pids" in limits else None,
            memory_max=self._memory_max if "memory" in limits else None,
        )

    async def exec(
        self,
        argv: Sequence[str],
        *,
        cwd_fd: int | None = None,
        cwd: str,
        on_data: OnData,
        signal: AbortSignal | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """Run ``argv`` as a new process tree and stream its merged output to ``on_data``.

        Args:
            argv: the program and its arguments (see :mod:`broker._shell` for shells).
            cwd_fd: an open directory fd to start in (``fchdir`` in the child, race-free); when
                given, errors name the directory it holds (``cwd`` if the kernel names none).
            cwd: the working directory (used as a path only when ``cwd_fd`` is ``None``).
            on_data: receives output bytes as they arrive; an awaitable result is awaited.
            signal: aborting it kills the tree; the result says why (``signal.kill_reason``:
                the :class:`~operations.KillReason` given to ``abort``, else ``ABORTED``).
            timeout: seconds; when they pass the tree is killed (``KillReason.TIMEOUT``).
            env: the command's whole environment (the caller builds it from policy); ``None``
                means :data:`MINIMAL_ENV`. ``OPSBROKER_EXEC_ID`` is always added.

        Returns:
            ``ExecResult(exit_code)`` when the shell exited (``ExecResult(None, signal=n)`` if a
            signal not sent by the broker ended it: ``None`` as the reference reports), or
            ``ExecResult(None, reason)`` when the broker killed the tree. Either way, no process of the tree is left when it returns.

        Raises:
            InvalidArgument: for an empty argv or an invalid timeout.
            NotFound: when the program or working directory does not exist.
            Unavailable: after :meth:`aclose`.

        **Cancellation:** if the awaiting task is cancelled, the tree is killed exactly as for an
        abort (SIGTERM, grace, SIGKILL, wait until empty), then ``CancelledError`` is re-raised.
        A second cancellation during that cleanup does not cut it short.
        """
        if self._closing:
            raise Unavailable("exec", None, "Cannot run a command: the process manager is closed.")
        if not argv:
            raise InvalidArgument("exec", None, "empty argv")
        check_timeout(timeout)
        if signal is not None and signal.aborted:
            return ExecResult(None, signal.kill_reason)
        loop = asyncio.get_running_loop()
        run, _ = self._spawn(argv, cwd_fd, cwd, env, _Stdio.merged(self._devnull()))
        run.last_activity = loop.time()
        self._runs.add(run)
        remove_listener: Callable[[], None] | None = None
        timer = None
        try:
            if signal is not None:

                def on_abort() -> None:
                    loop.call_soon_threadsafe(run.request_kill, signal.kill_reason)

                remove_listener = signal.add_listener(on_abort)
            if timeout is not None:
                timer = loop.call_later(timeout, run.request_kill, KillReason.TIMEOUT)
            return await self._supervise(run, [(run.read_fds[0], on_data)])
        finally:
            if timer is not None:
                timer.cancel()
            if remove_listener is not None:
                remove_listener()
            self._runs.discard(run)
            run.finished.set()

    def start(
        self,
        argv: Sequence[str],
        *,
        cwd_fd: int,
        cwd: str,
        env: Mapping[str, str] | None = None,
        pty: tuple[int, int] | None = None,
    ) -> LiveProcess:
        """Start ``argv`` as a tracked tree that outlives the call: with a stdin pipe and separate
        stdout and stderr pipes, or with a pseudo-terminal of ``pty`` = (cols, rows) cells as
        its controlling terminal (one output stream).

        The caller runs :meth:`LiveProcess.supervise` at once (it reads the output and ends when
        the tree does) and owns :attr:`LiveProcess.stdin_fd`. The same sandbox, tracking and kill
        path as :meth:`exec`; :meth:`aclose` kills it too (``KillReason.SHUTDOWN``).

        Raises:
            the errors of :meth:`exec`'s start.
        """
        if self._closing:
            raise Unavailable("exec", None, "Cannot run a command: the process manager is closed.")
        if not argv:
            raise InvalidArgument("exec", None, "empty argv")
        stdio = _Stdio.terminal(*pty) if pty is not None else _Stdio.pipes()
        run, stdin_fd = self._spawn(argv, cwd_fd, cwd, env, stdio)
        run.last_activity = asyncio.get_running_loop().time()
        run.read_chunk = LIVE_READ_CHUNK
        self._runs.add(run)
        return LiveProcess(self, run, stdin_fd, tty=pty is not None)

    async def aclose(self) -> None:
        """Kill every running command (``KillReason.SHUTDOWN``) and release the cgroups.

        **Cancellation:** waits for each tree to be empty; cancelling it leaves the commands'
        own calls to finish the kills.
        """
        self._closing = True
        runs = list(self._runs)
        for run in runs:
            run.request_kill(KillReason.SHUTDOWN)
        for run in runs:
            await run.finished.wait()
        self._close_resources()

    def _close_resources(self) -> None:
        if self._null_fd >= 0:
            os.close(self._null_fd)
            self._null_fd = -1
        self._tracker.close()
        if self._own_scope is not None:
            self._own_scope.close()
            self._own_scope = None
        self._scope = None

    # -- spawning -------------------------------------------------------------------------------

    def _spawn(
        self,
        argv: Sequence[str],
        cwd_fd: int | None,
        cwd: str,
        env: Mapping[str, str] | None,
        stdio: _Stdio,
    ) -> tuple[_Run, int]:
        """Start the command, tracked (its tree) and scoped before any of its own code runs.

        :mod:`broker._spawn` creates the child inside the command's cgroup v2 group (clone3
        with CLONE_INTO_CGROUP, else vfork and a write to ``cgroup.procs``) and, in the child,
        enters the v1 limit groups, a new session and its own Landlock domain, then execs: nothing
        runs untracked or unscoped, and nothing of the broker enters the domain. The files it
        needs are opened here first. Returns the run and the broker's end of its stdin (``-1``
        for ``/dev/null``).
        """
        if _native is None:
            raise Unavailable("exec", None, NATIVE_MISSING)
        cookie = f"{self._tracker.cookie_prefix}{next(self._command_ids):x}"
        child_env, encoded = self._environment(env)
        environ = [*encoded, os.fsencode(f"{COOKIE_VAR}={cookie}")]
        opened: list[int] = []
        tree: Tree | None = None
        try:
            ruleset_fd, no_new_privs = self._scope.entry() if self._scope else (-1, False)
            if cwd_fd is None:
                cwd_fd = os.open(cwd, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                opened.append(cwd_fd)
            tree = self._tracker.new_tree(cookie)
            group_fd, procs = tree.spawn_fds()
            pid = _native.spawn(
                _executables(argv[0], child_env.get("PATH")),
                [os.fsencode(arg) for arg in argv],
                environ,
                stdin_fd=stdio.child[0],
                stdout_fd=stdio.child[1],
                stderr_fd=stdio.child[2],
                controlling_tty=stdio.tty,
                cwd_fd=cwd_fd,
                cgroup_fds=procs,
                cgroup_dir_fd=group_fd,
                ruleset_fd=ruleset_fd,
                no_new_privs=no_new_privs,
            )
        except BaseException as e:
            stdio.close_parent()
            if tree is not None:
                tree.discard()
            name = cwd if cwd_fd is None or cwd_fd in opened else _fd_path(cwd_fd, cwd)
            raise _spawn_error(e, argv, name) from e
        finally:
            stdio.close_child()
            for fd in opened:
                os.close(fd)
        for fd in (*stdio.read_fds, stdio.stdin):
            if fd >= 0:
                os.set_blocking(fd, False)
        pidfd = None
        if self._pidfd:
            with contextlib.suppress(OSError):
                pidfd = os.pidfd_open(pid)
        tree.started(pid, pidfd)
        run = _Run(leader=_Leader(pid), read_fds=list(stdio.read_fds), pidfd=pidfd, tree=tree)
        return run, stdio.stdin

    def _environment(self, env: Mapping[str, str] | None) -> tuple[Mapping[str, str], list[bytes]]:
        """A command's environment without its cookie, and that encoded: ``env`` (``None``:
        :data:`MINIMAL_ENV`) with the sandbox's variables over it (its only writable temp dir).
        The last one is kept: a policy gives its commands the same environment, and encoding it
        costs more than comparing it."""
        if env is None:
            return self._default_env, self._default_environ
        last = self._last_env
        if last is not None and last[0] == env:
            return last[1], last[2]
        child_env = {**env, **self._sandbox_env}
        child_env.pop(COOKIE_VAR, None)  # the cookie is the broker's, never the caller's
        encoded = _encode_env(child_env)
        self._last_env = (dict(env), child_env, encoded)
        return child_env, encoded

    def _devnull(self) -> int:
        if self._null_fd < 0:
            self._null_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        return self._null_fd

    # -- supervising ----------------------------------------------------------------------------

    async def _supervise(self, run: _Run, readers: Sequence[tuple[int, OnData]]) -> ExecResult:
        # One task (the pump, which awaits ``on_data``); the exit and the kill are futures that
        # callbacks complete, so a command costs few event-loop turns.
        pump = asyncio.create_task(
            self._pump(run, *readers[0]) if len(readers) == 1 else self._pump_all(run, readers)
        )
        exited = self._watch_exit(run)
        error: BaseException | None = None
        cancelled = False
        try:
            await self._wait_end(run, pump, exited)
        except asyncio.CancelledError:
            cancelled = True
            run.request_kill(KillReason.ABORTED)
        except BaseException as e:  # on_data failed, or something unexpected: still kill
            error = e
            run.request_kill(KillReason.ABORTED)
        # Once empty, a tree stays empty: whether it must be killed is decided here, once.
        kill = run.kill_reason is not None or run.tree.alive()
        again = False
        if not kill and pump.done() and exited.done():
            # The common end: nothing left to kill, read or reap, so finishing never suspends
            # and no cancellation can cut it short.
            await self._finish(run, pump, exited, kill=False)
        else:
            _, again = await _run_to_end(self._finish(run, pump, exited, kill=kill))
        if cancelled or again:
            raise asyncio.CancelledError
        if error is not None:
            raise error
        if run.kill_reason is not None:
            return ExecResult(None, run.kill_reason)
        code = run.leader.returncode
        if code is not None and code < 0:
            return ExecResult(None, signal=-code)
        return ExecResult(code)

    async def _wait_end(
        self, run: _Run, pump: asyncio.Task[None], exited: asyncio.Future[None]
    ) -> None:
        """Return when the tree must be killed, or the shell exited and output went idle (no
        output for the idle grace while the pump waits for it; time spent in ``on_data``, a slow
        consumer, does not count: what is still in the pipe is delivered)."""
        loop = asyncio.get_running_loop()
        killed = run.killed
        while not exited.done() and not killed.done():
            await _first((exited, killed) if pump.done() else (exited, killed, pump))
            if pump.done():
                pump.result()  # on_data raised: propagate (the caller kills the tree)
        if run.kill_reason is not None:
            return
        run.last_activity = max(run.last_activity, loop.time())
        while not pump.done() and run.kill_reason is None:
            remaining = run.last_activity + self._idle_grace - loop.time()
            if remaining <= 0:
                if not run.delivering:
                    return
                remaining = self._idle_grace  # look again once on_data may have returned
            await asyncio.wait(
                (pump, killed), timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
        if pump.done():
            pump.result()

    async def _pump_all(self, run: _Run, readers: Sequence[tuple[int, OnData]]) -> None:
        await asyncio.gather(*(self._pump(run, fd, on_data) for fd, on_data in readers))

    async def _pump(self, run: _Run, fd: int, on_data: OnData) -> None:
        """Read ``fd`` in bounded chunks and deliver them, until EOF (or, for a terminal, EIO
        once every holder of its slave side has gone).

        The output limit is the policy's (``exec.max_output_bytes``, enforced by
        :class:`~operations.GuardedBackend` for every backend): ``on_data`` aborts the signal with
        ``KillReason.OUTPUT_LIMIT`` and drops what comes after.
        """
        loop = asyncio.get_running_loop()
        while True:
            try:
                data = os.read(fd, run.read_chunk)
            except BlockingIOError:
                await readable(fd)
                continue
            except OSError:
                return
            if not data:
                return
            run.delivering += 1
            try:
                result = on_data(data)
                if inspect.isawaitable(result):
                    await result
                else:
                    await asyncio.sleep(0)  # a producer that never blocks must not starve the loop
            finally:
                run.delivering -= 1
            run.last_activity = loop.time()

    def _watch_exit(self, run: _Run) -> asyncio.Future[None]:
        """A future done once the leader has exited and been reaped: a callback on its pidfd
        (no task), else a thread that waits for it."""
        if run.pidfd is None:
            return asyncio.ensure_future(self._wait_exit(run))
        loop = asyncio.get_running_loop()
        exited: asyncio.Future[None] = loop.create_future()
        pidfd = run.pidfd

        def reap() -> None:
            loop.remove_reader(pidfd)
            try:
                run.leader.wait()  # it has exited: this does not block
                run.tree.leader_exited()
            except BaseException as e:
                exited.set_exception(e)
            else:
                exited.set_result(None)

        loop.add_reader(pidfd, reap)
        return exited

    async def _wait_exit(self, run: _Run) -> None:
        """Wait (in a thread) for the leader to exit and reap it: the path without pidfds."""
        await asyncio.get_running_loop().run_in_executor(None, run.leader.wait)
        run.tree.leader_exited()

    async def _finish(
        self, run: _Run, pump: asyncio.Task[None], exited: asyncio.Future[None], *, kill: bool
    ) -> None:
        """Kill what is left of the tree (with ``kill``), stop reading, reap, and release the
        command's fds."""
        try:
            if kill:
                await self._kill_tree(run)
            pump.cancel()
            with contextlib.suppress(BaseException):
                await pump
            await exited
        finally:
            for fd in run.read_fds:
                os.close(fd)
            if run.pidfd is not None:
                os.close(run.pidfd)
            await run.tree.release()

    # -- the one kill path ----------------------------------------------------------------------

    async def _kill_tree(self, run: _Run) -> None:
        """SIGTERM (+SIGCONT), grace, then SIGKILL until the tree is empty."""
        tree = run.tree
        tree.signal(_signal.SIGTERM)
        tree.signal(_signal.SIGCONT)
        if await _wait_empty(tree, self._kill_grace):
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + EMPTY_TREE_LIMIT_S
        while True:
            tree.signal(_signal.SIGKILL)
            if await _wait_empty(tree, 0.1):
                return
            if loop.time() > deadline:
                log.error(
                    "exec: process tree of pid %d survives SIGKILL; giving up (%s)",
                    run.pid,
                    tree.members(),
                )
                return


async def _first(futures: Sequence[asyncio.Future[Any]]) -> None:
    """Return once one of ``futures`` is done: ``asyncio.wait(..., FIRST_COMPLETED)`` without
    its sets and wrappers, which cost a command more than the wait itself."""
    waiter = asyncio.get_running_loop().create_future()

    def wake(_: object) -> None:
        if not waiter.done():
            waiter.set_result(None)

    for future in futures:
        future.add_done_callback(wake)
    try:
        await waiter
    finally:
        for future in futures:
            future.remove_done_callback(wake)


async def _wait_empty(tree: Tree, within: float) -> bool:
    """Whether ``tree`` is empty within ``within`` seconds (polled, backing off)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    delay = POLL_FIRST_S
    while True:
        if not tree.alive():
            return True
        now = loop.time()
        if now >= deadline:
            return False
        await asyncio.sleep(min(delay, deadline - now))
        delay = min(delay * 2, POLL_MAX_S)
