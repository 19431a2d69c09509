"""Running commands: one process tree per command, streamed output, and one kill path.

Every command runs in a new session and process group, with stdin at ``/dev/null`` and stdout and
stderr merged into one pipe that is read in bounded chunks and handed to ``on_data`` as it comes
(awaiting it when it returns an awaitable, so a slow consumer slows the command instead of growing
the broker's memory).

The tree is tracked so that ``setsid`` and double forks cannot escape:

- **cgroup mode** (a writable cgroup v2 tree with ``cgroup.kill``): each command gets its own
  cgroup, entered by the child itself between fork and exec; the tree is empty when
  ``cgroup.events`` says ``populated 0``. ``pids.max`` and memory limits apply here.
- **fallback**: the broker becomes the child subreaper, each command carries an environment cookie
  (``OPSBROKER_EXEC_ID``), and a ``/proc`` sweep finds the command's session, the cookie holders
  and their descendants (:mod:`broker._proctree`).

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
(re-armed on every chunk, as the reference's ``waitForChildProcess``), then whatever is still
running in the tree is killed the same way: no background process outlives its command.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import inspect
import logging
import math
import os
import secrets
import signal as _signal
import time
import uuid
import weakref
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
)

from ._cgroup import CgroupTree, CommandCgroup
from ._landlock import Ruleset, Sandbox
from ._proctree import (
    COOKIE_VAR,
    PIDFD_SIGNAL_PROCESS_GROUP,
    ProcStat,
    has_pidfd,
    is_child_subreaper,
    kill_commands,
    own_children,
    owner_id,
    pidfd_signal,
    read_cookie,
    read_stat,
    set_child_subreaper,
    stats_since,
)
from ._signal_scope import signal_scope

try:
    from . import _spawn as _native
except ImportError:  # a source tree that was never built; commands then fail with NATIVE_MISSING
    _native = None  # type: ignore[assignment]

__all__ = ["ProcessCapabilities", "ProcessManager"]

log = logging.getLogger(__name__)
T = TypeVar("T")

KILL_GRACE_S = 1.0
"""SIGTERM -> SIGKILL: time for a well-behaved tool to clean up, short enough to return promptly."""

IDLE_GRACE_S = 0.1
"""After the shell exits, stop reading once output has been idle this long (reference: 100 ms)."""

READ_CHUNK = 256 * 1024
"""Bytes read from the pipe at a time: the most output the broker holds for one command."""

PIPE_SIZE = 1024 * 1024
"""Kernel pipe buffer for the output pipe: fewer wake-ups for fast producers (Linux, best effort)."""

_F_SETPIPE_SZ = 1031

MAX_TIMEOUT_S = 2147483.647
"""Largest timeout accepted (the reference's limit: 2**31-1 milliseconds)."""

EMPTY_TREE_LIMIT_S = 10.0
"""After SIGKILL, how long to keep killing before reporting a tree that will not die (D state)."""

REAP_SETTLE_S = 0.2
"""How long a killed member may take to become the broker's zombie (exit is not atomic)."""

STALE_ZOMBIE_S = 5.0
"""A zombie child unreaped this long was adopted, not spawned (asyncio reaps within ms)."""

POLL_FIRST_S = 0.0005
POLL_MAX_S = 0.02
"""Tree-empty polling: start fast (a killed tree usually empties in a millisecond), back off."""

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


@dataclass(eq=False)
class _Run:
    """One running command: its leader, pipe, tracking and why (if) it is being killed."""

    leader: _Leader
    read_fd: int
    pidfd: int | None
    cookie: str
    leader_start: int
    cgroup: CommandCgroup | None
    kill_reason: KillReason | None = None
    kill_event: asyncio.Event = field(default_factory=asyncio.Event)
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    last_activity: float = 0.0
    total: int = 0
    adopted: dict[int, int] = field(default_factory=dict)
    known: dict[int, int] = field(default_factory=dict)
    leader_gone: bool = False

    @property
    def pid(self) -> int:
        return self.leader.pid

    def request_kill(self, reason: KillReason) -> None:
        """Ask for the tree to be killed; the first reason wins."""
        if self.kill_reason is None:
            self.kill_reason = reason
            self.kill_event.set()


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


def _executables(program: str, env: Mapping[str, str]) -> list[bytes]:
    """Where to look for ``program``: itself if it has a ``/``, else each ``PATH`` entry of the
    command's environment, as ``execvpe`` and ``subprocess`` do."""
    name = os.fsencode(program)
    if b"/" in name:
        return [name]
    return [os.path.join(os.fsencode(d or "."), name) for d in os.get_exec_path(dict(env))]


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


def _check_timeout(timeout: float | None) -> None:
    if timeout is None:
        return
    if not isinstance(timeout, int | float) or not math.isfinite(timeout) or timeout <= 0:
        raise InvalidArgument("exec", None, "Invalid timeout: must be a finite number of seconds")
    if timeout > MAX_TIMEOUT_S:
        raise InvalidArgument("exec", None, f"Invalid timeout: maximum is {MAX_TIMEOUT_S} seconds")


async def _readable(fd: int) -> None:
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
        max_output_bytes: output beyond this kills the tree (``KillReason.OUTPUT_LIMIT``); the
            bytes up to the limit are delivered.
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
        max_output_bytes: int | None = None,
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
        self._max_output = max_output_bytes
        self._pids_max = pids_max
        self._memory_max = memory_max
        self._runs: set[_Run] = set()
        self._null_fd = -1
        self._stale_zombies: dict[tuple[int, int], float] = {}
        self._closing = False
        self._pidfd = has_pidfd()
        self._cgroups: CgroupTree | None = None
        if use_cgroups is not False:
            self._cgroups = CgroupTree.create()
            if self._cgroups is None and use_cgroups:
                raise Unavailable(
                    "exec", None, "no writable cgroup v2 tree with cgroup.kill on this host"
                )
        self._subreaper = self._cgroups is None and _Subreaper.acquire()
        # Cookies name this manager: without cgroups, they are how commands left behind by a
        # broker that was killed are found by the next manager, and ours at exit if never closed.
        self._cookie_prefix = f"{owner_id()}-{secrets.token_hex(4)}."
        self._leftovers: weakref.finalize[Any, ProcessManager] | None = None
        if self._cgroups is None:
            killed = kill_commands()
            if killed:
                log.info("killed %d processes left by brokers that are gone", killed)
            self._leftovers = weakref.finalize(
                self, _kill_leftovers, os.getpid(), self._cookie_prefix
            )
        self._sandbox = sandbox
        self._sandbox_env = sandbox.env() if isinstance(sandbox, Sandbox) else {}
        self._own_scope: Ruleset | None = None
        if sandbox is None and scope_signals is not False:
            self._own_scope = signal_scope()
        self._scope = sandbox if sandbox is not None else self._own_scope
        scoped = self._scope is not None and self._scope.signal_scoping
        if scope_signals and not scoped:
            self._close_resources()
            raise Unavailable("exec", None, "Landlock signal scoping is not available")

    def capabilities(self) -> ProcessCapabilities:
        """What this manager uses on this host (cgroup kill, pidfds, subreaper, signal scope)."""
        return ProcessCapabilities(
            cgroup_kill=self._cgroups is not None,
            pidfd=self._pidfd,
            subreaper=self._subreaper,
            signal_scope=self._scope is not None and self._scope.signal_scoping,
            sandbox=self._sandbox is not None,
            limits=frozenset(self._cgroups.limits if self._cgroups is not None else ()),
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
                given, ``cwd`` only names it in errors.
            cwd: the working directory (used as a path only when ``cwd_fd`` is ``None``).
            on_data: receives output bytes as they arrive; an awaitable result is awaited.
            signal: aborting it kills the tree; the result says ``KillReason.ABORTED``.
            timeout: seconds; when they pass the tree is killed (``KillReason.TIMEOUT``).
            env: the command's whole environment (the caller builds it from policy); ``None``
                means :data:`MINIMAL_ENV`. ``OPSBROKER_EXEC_ID`` is always added.

        Returns:
            ``ExecResult(exit_code)`` when the shell exited (``None`` if a signal not sent by the
            broker ended it, as the reference reports), or ``ExecResult(None, reason)`` when the
            broker killed the tree. Either way, no process of the tree is left when it returns.

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
        _check_timeout(timeout)
        if signal is not None and signal.aborted:
            return ExecResult(None, KillReason.ABORTED)
        loop = asyncio.get_running_loop()
        run = await self._spawn(argv, cwd_fd, cwd, env)
        run.last_activity = loop.time()
        self._runs.add(run)
        remove_listener: Callable[[], None] | None = None
        timer = None
        try:
            if signal is not None:

                def on_abort() -> None:
                    loop.call_soon_threadsafe(run.request_kill, KillReason.ABORTED)

                remove_listener = signal.add_listener(on_abort)
            if timeout is not None:
                timer = loop.call_later(timeout, run.request_kill, KillReason.TIMEOUT)
            return await self._supervise(run, on_data)
        finally:
            if timer is not None:
                timer.cancel()
            if remove_listener is not None:
                remove_listener()
            self._runs.discard(run)
            run.finished.set()

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
        if self._leftovers is not None:
            self._leftovers.detach()  # every command has ended
            self._leftovers = None
        if self._null_fd >= 0:
            os.close(self._null_fd)
            self._null_fd = -1
        if self._subreaper:
            self._subreaper = False
            _Subreaper.release()
        if self._cgroups is not None:
            self._cgroups.remove()
            self._cgroups = None
        if self._own_scope is not None:
            self._own_scope.close()
            self._own_scope = None
        self._scope = None

    # -- spawning -------------------------------------------------------------------------------

    async def _spawn(
        self, argv: Sequence[str], cwd_fd: int | None, cwd: str, env: Mapping[str, str] | None
    ) -> _Run:
        """Start the command, tracked (cgroup) and scoped before any of its own code runs.

        :mod:`broker._spawn` creates the child inside the command's cgroup v2 group (clone3
        with CLONE_INTO_CGROUP, else vfork and a write to ``cgroup.procs``) and, in the child,
        enters the v1 limit groups, a new session and its own Landlock domain, then execs: nothing
        runs untracked or unscoped, and nothing of the broker enters the domain. The files it
        needs are opened here first.
        """
        if _native is None:
            raise Unavailable("exec", None, NATIVE_MISSING)
        cookie = self._cookie_prefix + uuid.uuid4().hex
        child_env = dict(MINIMAL_ENV if env is None else env)
        child_env.update(self._sandbox_env)  # the only temp dir a sandboxed command can write
        child_env[COOKIE_VAR] = cookie
        environ = _encode_env(child_env)
        read_fd, write_fd = os.pipe()
        with contextlib.suppress(OSError):
            fcntl.fcntl(read_fd, _F_SETPIPE_SZ, PIPE_SIZE)
        opened: list[int] = []
        cgroup = None
        try:
            ruleset_fd, no_new_privs = self._scope.entry() if self._scope else (-1, False)
            if cwd_fd is None:
                cwd_fd = os.open(cwd, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                opened.append(cwd_fd)
            procs, group_fd = [], -1
            if self._cgroups is not None:
                cgroup = self._cgroups.new_command(
                    pids_max=self._pids_max, memory_max=self._memory_max
                )
                # The v2 group as a directory: the child is created in it (clone3 takes O_PATH);
                # v1 limit groups are joined by a write to their cgroup.procs in the child.
                group_fd = os.open(cgroup.path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                opened.append(group_fd)
                for group in cgroup.limit_paths:
                    procs.append(
                        os.open(os.path.join(group, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
                    )
                    opened.append(procs[-1])
            pid = _native.spawn(
                _executables(argv[0], child_env),
                [os.fsencode(arg) for arg in argv],
                environ,
                stdin_fd=self._devnull(),
                stdout_fd=write_fd,
                cwd_fd=cwd_fd,
                cgroup_fds=procs,
                cgroup_dir_fd=group_fd,
                ruleset_fd=ruleset_fd,
                no_new_privs=no_new_privs,
            )
        except BaseException as e:
            os.close(read_fd)
            if cgroup is not None:
                cgroup.remove()
            raise _spawn_error(e, argv, cwd) from e
        finally:
            os.close(write_fd)
            for fd in opened:
                os.close(fd)
        os.set_blocking(read_fd, False)
        pidfd = None
        if self._pidfd:
            with contextlib.suppress(OSError):
                pidfd = os.pidfd_open(pid)
        st = read_stat(pid)
        return _Run(
            leader=_Leader(pid),
            read_fd=read_fd,
            pidfd=pidfd,
            cookie=cookie,
            leader_start=st.starttime if st is not None else 0,
            cgroup=cgroup,
        )

    def _devnull(self) -> int:
        if self._null_fd < 0:
            self._null_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        return self._null_fd

    # -- supervising ----------------------------------------------------------------------------

    async def _supervise(self, run: _Run, on_data: OnData) -> ExecResult:
        pump = asyncio.create_task(self._pump(run, on_data))
        exited = asyncio.create_task(self._wait_exit(run))
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
        _, again = await _run_to_end(self._finish(run, pump, exited))
        if cancelled or again:
            raise asyncio.CancelledError
        if error is not None:
            raise error
        if run.kill_reason is not None:
            return ExecResult(None, run.kill_reason)
        code = run.leader.returncode
        return ExecResult(code if code is not None and code >= 0 else None)

    async def _wait_end(
        self, run: _Run, pump: asyncio.Task[None], exited: asyncio.Task[None]
    ) -> None:
        """Return when the tree must be killed, or the shell exited and output went idle."""
        loop = asyncio.get_running_loop()
        killed = asyncio.create_task(run.kill_event.wait())
        try:
            while not exited.done() and not killed.done():
                waiters = {exited, killed} if pump.done() else {exited, killed, pump}
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                if pump.done():
                    pump.result()  # on_data raised: propagate (the caller kills the tree)
            if run.kill_reason is not None:
                return
            run.last_activity = max(run.last_activity, loop.time())
            while not pump.done() and run.kill_reason is None:
                remaining = run.last_activity + self._idle_grace - loop.time()
                if remaining <= 0:
                    return
                await asyncio.wait({pump, killed}, timeout=remaining)
            if pump.done():
                pump.result()
        finally:
            killed.cancel()

    async def _pump(self, run: _Run, on_data: OnData) -> None:
        """Read the pipe in bounded chunks and deliver them, until EOF or the output limit."""
        loop = asyncio.get_running_loop()
        limit = self._max_output
        while True:
            try:
                data = os.read(run.read_fd, READ_CHUNK)
            except BlockingIOError:
                await _readable(run.read_fd)
                continue
            except OSError:
                return
            if not data:
                return
            run.last_activity = loop.time()
            if limit is not None and run.total + len(data) > limit:
                data = data[: limit - run.total]
                run.request_kill(KillReason.OUTPUT_LIMIT)
            run.total += len(data)
            if data:
                result = on_data(data)
                if inspect.isawaitable(result):
                    await result
                else:
                    await asyncio.sleep(0)  # a producer that never blocks must not starve the loop
                run.last_activity = loop.time()
            if run.kill_reason is KillReason.OUTPUT_LIMIT:
                return

    async def _wait_exit(self, run: _Run) -> None:
        """Wait for the leader to exit and reap it (through its pidfd where there is one)."""
        if run.pidfd is not None:
            await _readable(run.pidfd)
            run.leader.wait()
        else:
            await asyncio.get_running_loop().run_in_executor(None, run.leader.wait)
        run.leader_gone = True

    async def _finish(
        self, run: _Run, pump: asyncio.Task[None], exited: asyncio.Task[None]
    ) -> None:
        """Kill what is left of the tree, stop reading, reap, and release the command's fds."""
        try:
            if run.kill_reason is not None or self._tree_alive(run):
                await self._kill_tree(run)
            pump.cancel()
            with contextlib.suppress(BaseException):
                await pump
            await exited
        finally:
            os.close(run.read_fd)
            if run.pidfd is not None:
                os.close(run.pidfd)
            if run.adopted:
                await self._reap_adopted(run)
            if self._stale_zombies:
                self._reap_stale_zombies()
            if run.cgroup is not None:
                try:
                    run.cgroup.remove()
                except OSError as e:
                    log.warning("exec: could not remove cgroup %s: %s", run.cgroup.path, e)

    # -- the one kill path ----------------------------------------------------------------------

    async def _kill_tree(self, run: _Run) -> None:
        """SIGTERM (+SIGCONT), grace, then SIGKILL until the tree is empty."""
        self._signal_tree(run, _signal.SIGTERM)
        self._signal_tree(run, _signal.SIGCONT)
        if await self._wait_empty(run, self._kill_grace):
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + EMPTY_TREE_LIMIT_S
        while True:
            self._signal_tree(run, _signal.SIGKILL)
            if await self._wait_empty(run, 0.1):
                return
            if loop.time() > deadline:
                log.error(
                    "exec: process tree of pid %d survives SIGKILL; giving up (%s)",
                    run.pid,
                    run.cgroup.pids()
                    if run.cgroup
                    else sorted(self._members(run).values(), key=str),
                )
                return

    async def _wait_empty(self, run: _Run, within: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        delay = POLL_FIRST_S
        while True:
            if not self._tree_alive(run):
                return True
            now = loop.time()
            if now >= deadline:
                return False
            await asyncio.sleep(min(delay, deadline - now))
            delay = min(delay * 2, POLL_MAX_S)

    def _tree_alive(self, run: _Run) -> bool:
        if run.cgroup is not None:
            return run.cgroup.populated()
        # While a member found by the last sweep is still alive, no new sweep is needed (a
        # sweep reads every process on the host); once they are all gone, one sweep confirms.
        for pid, start in run.known.items():
            st = read_stat(pid)
            if st is not None and st.starttime == start and st.alive:
                return True
        if run.leader_gone and self._subreaper:
            alive = self._orphans_alive(run)
            if alive is not None:
                return alive
        return any(st.alive for st in self._members(run).values())

    def _orphans_alive(self, run: _Run) -> bool | None:
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
        leaders = {r.pid for r in self._runs}
        cookie = run.cookie.encode()
        for pid in children:
            st = read_stat(pid)
            if st is None or st.ppid != me:
                return None  # reaped while the list was read, which may have skipped a child
            if pid in leaders:
                continue
            if st.starttime < run.leader_start:  # older than the command: none of its own
                if not st.alive:
                    self._stale_zombies.setdefault((pid, st.starttime), time.monotonic())
                continue
            if not st.alive:
                return None  # a zombie, perhaps the command's: the sweep reaps it now
            if st.sid == run.pid or read_cookie(pid) == cookie:
                return True
            return None
        return False

    def _signal_tree(self, run: _Run, sig: int) -> None:
        """Send ``sig`` to every member (``cgroup.kill`` for SIGKILL in cgroup mode).

        Members are listed (and remembered for reaping) before anything is signalled: a process
        that dies first would leave orphans the broker adopts without knowing them.
        """
        cgroup = run.cgroup
        if cgroup is not None:
            pids = cgroup.pids()
            self._note_adopted(run, pids)
            members = None
        else:
            members = self._members(run)
        if run.pidfd is not None:
            # The leader's process group, race-free through its pidfd (Linux 6.9).
            with contextlib.suppress(OSError):
                _signal.pidfd_send_signal(run.pidfd, sig, None, PIDFD_SIGNAL_PROCESS_GROUP)
        if cgroup is not None:
            if sig == _signal.SIGKILL:
                with contextlib.suppress(OSError):
                    cgroup.kill()
                return
            for pid in pids:
                pidfd_signal(pid, sig, cgroup.contains)
            return
        assert members is not None
        for pid, st in members.items():
            if st.alive:
                pidfd_signal(pid, sig, _same_process(st))

    def _members(self, run: _Run) -> dict[int, ProcStat]:
        """The command's processes, by ``/proc``: its session, cookie holders, their descendants.

        Zombies among them that the broker adopted (subreaper) are reaped on the way.
        """
        me = os.getpid()
        cookie = run.cookie.encode()
        # Anything started before the leader cannot descend from the command.
        candidates = stats_since(run.leader_start, exclude=(1, me))
        # As the subreaper, every member that left the session either still has a member as
        # parent (the closure below finds it) or was re-parented to the broker: only those need
        # their environment read (an environ read can wait on a busy process's memory lock).
        sub = self._subreaper
        members = {
            pid: st
            for pid, st in candidates.items()
            if st.sid == run.pid
            or pid == run.pid
            or (st.alive and (not sub or st.ppid == me) and read_cookie(pid) == cookie)
        }
        grew = True
        while grew:
            grew = False
            for pid, st in candidates.items():
                if pid not in members and st.ppid in members:
                    members[pid] = st
                    grew = True
        self._note_adopted(run, members)
        run.known = {pid: st.starttime for pid, st in members.items() if st.alive}
        leaders = {r.pid for r in self._runs}
        for pid, st in candidates.items():
            if st.alive or st.ppid != me or pid in leaders:
                continue
            if pid in members:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
            elif self._subreaper:
                self._stale_zombies.setdefault((pid, st.starttime), time.monotonic())
        return members

    def _reap_stale_zombies(self) -> None:
        """Reap zombie children nobody has reaped for ``STALE_ZOMBIE_S`` (fallback mode only).

        A ``setsid`` orphan that exits on its own before any sweep sees it alive becomes a zombie
        child of the broker (the subreaper) that no command can be matched to. asyncio and
        ``subprocess`` reap their own children within milliseconds, so a zombie child that has
        stayed unreaped this long is one the broker adopted.
        """
        now = time.monotonic()
        me = os.getpid()
        for key, first_seen in list(self._stale_zombies.items()):
            if now - first_seen < STALE_ZOMBIE_S:
                continue
            del self._stale_zombies[key]
            pid, start = key
            st = read_stat(pid)
            if st is not None and not st.alive and st.ppid == me and st.starttime == start:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)

    def _note_adopted(self, run: _Run, pids: Mapping[int, ProcStat] | Sequence[int]) -> None:
        """Remember members (pid and start time) so that those the broker adopts (subreaper:
        their parent died, often in the same kill) can be reaped once they are zombies."""
        if not self._subreaper and not is_child_subreaper():
            return
        for pid in pids:
            st = pids[pid] if isinstance(pids, Mapping) else read_stat(pid)
            if st is not None and pid != run.pid:
                run.adopted[pid] = st.starttime

    async def _reap_adopted(self, run: _Run) -> None:
        """Reap the zombies the broker adopted from this command, and only those (never a pid
        that asyncio or other code spawned: each is checked by pid, start time and parent).

        A killed tree is empty (``populated 0``) slightly before its processes are zombies and
        their orphans re-parented, so this waits up to ``REAP_SETTLE_S`` for each recorded
        member to be gone or be the broker's zombie.
        """
        me = os.getpid()
        pending = dict(run.adopted)
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


class _Subreaper:
    """The process-wide child-subreaper flag, held while any fallback manager is open.

    Set by the first fallback manager and cleared by the last one to close (unless it was set
    before, e.g. by the embedder), so that a process that only briefly needs the fallback (a test
    run) does not adopt every orphan of its other children for the rest of its life.
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
    """A manager never closed: kill what its commands left, at exit (not in a forked child)."""
    if os.getpid() == pid:
        kill_commands(prefix)
