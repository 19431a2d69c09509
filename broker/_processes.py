"""``ProcessTable``: the broker core's processes that outlive a call.

It implements :class:`~operations.GatedProcessOperations`. A started process lives here, in the
core, not in a connection: it has a random, stable id (``p-`` and 12 hex digits) and an owner (the
caller's principal; ``None`` for an embedder, which sees every process), and only its owner sees
and operates it. It is spawned exactly as ``exec`` spawns a command (the cwd opened beneath the
root, :data:`~broker._process.MINIMAL_ENV` plus the caller's environment, bash, the sandbox and the
tracked tree of :class:`~broker._process.ProcessManager`), with a stdin pipe and stdout and stderr
apart, or on a pseudo-terminal.

Its output goes to an :class:`OutputRing` of ``process.ring_bytes``: global offsets, chunks tagged
by stream, the oldest bytes dropped when full, so the process is never slowed by an attacher and
an attacher that falls behind is told how much it missed; or, for a process started with
``backpressure``, the process waits for its attachers and nothing is lost. The lifetime
(``timeout``, at most ``process.max_lifetime``), the idle timeout (no output for that long),
``kill`` and :meth:`aclose` all kill through the manager's one kill path. A finished process's
record and ring are kept for ``process.retention`` seconds, then forgotten (its id is then
unknown).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import errno
import functools
import os
import secrets
import signal as _signal
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field

from operations import (
    ExecResult,
    Gate,
    InvalidArgument,
    KillReason,
    NotFound,
    PolicyDenied,
    ProcessInfo,
    ProcessOutput,
    ProcessPolicy,
    ProcessState,
    PtySize,
    RingReaders,
    Stream,
    Unavailable,
    check_timeout,
)

from ._process import MINIMAL_ENV, LiveProcess, ProcessManager, set_winsize
from ._shell import bash_argv

__all__ = ["OpenCwd", "OutputRing", "ProcessTable"]

OpenCwd = Callable[[str, str, Gate | None], int]
"""``(op, cwd, gate) -> fd``: the working directory opened beneath the root."""

PIECE_BYTES = 256 * 1024
"""At most this much output in one :class:`~operations.ProcessOutput` handed to an attacher."""

MAX_PTY_CELLS = 0xFFFF
"""A terminal dimension must fit the kernel's ``winsize`` (unsigned short)."""

PTY_TERM = "xterm-256color"
"""``TERM`` of a process on a PTY when the caller sets none (programs need one to draw)."""

_VEOF = b"\x04"


class OutputRing:
    """The last ``capacity`` bytes of a process's output, as chunks at global offsets.

    Appending never waits: when full, the oldest bytes are dropped. Readers wait on
    :attr:`changed`, an event set (and replaced) on every append and at the end.

    A ``backpressure`` ring drops only bytes every reader has read (none while no reader
    follows): its writer waits for :meth:`room` first, and each reader says in
    :attr:`readers` how far it has read.
    """

    __slots__ = (
        "_capacity",
        "_chunks",
        "_head",
        "_held",
        "_offsets",
        "backpressure",
        "changed",
        "end",
        "readers",
    )

    def __init__(self, capacity: int, *, backpressure: bool = False) -> None:
        self._capacity = capacity
        self._chunks: list[tuple[Stream, bytes]] = []
        self._offsets: list[int] = []
        self._head = 0  # chunks before it were dropped (compacted from time to time)
        self._held = 0
        self.end = 0
        """The offset of the next byte: every byte produced so far."""
        self.changed = asyncio.Event()
        self.backpressure = backpressure
        self.readers = RingReaders()

    @property
    def start(self) -> int:
        """The offset of the oldest byte still held."""
        return self.end - self._held

    async def room(self, size: int) -> None:
        """Wait until ``size`` more bytes fit without dropping a byte some reader has yet to
        read (:meth:`~operations.RingReaders.room`; at once without backpressure)."""
        if self.backpressure:
            await self.readers.room(self, size, self._capacity)

    def append(self, stream: Stream, data: bytes) -> None:
        if len(data) > self._capacity and not self.backpressure:  # only its tail can be held
            self.end += len(data) - self._capacity
            data = data[-self._capacity :]
        self._chunks.append((stream, data))
        self._offsets.append(self.end)
        self.end += len(data)
        self._held += len(data)
        # A backpressure ring takes a chunk larger than itself whole, once all before is read.
        limit = max(self._capacity, len(data)) if self.backpressure else self._capacity
        self._drop(self._held - limit)
        self.notify()

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def _drop(self, excess: int) -> None:
        while excess > 0:
            stream, data = self._chunks[self._head]
            if len(data) <= excess:
                self._chunks[self._head] = (stream, b"")
                self._head += 1
                self._held -= len(data)
                excess -= len(data)
                continue
            self._chunks[self._head] = (stream, data[excess:])
            self._offsets[self._head] += excess
            self._held -= excess
            excess = 0
        if self._head > 64 and self._head * 2 > len(self._chunks):
            del self._chunks[: self._head]
            del self._offsets[: self._head]
            self._head = 0

    def read(self, offset: int) -> list[ProcessOutput]:
        """What is held from ``offset`` on, consecutive chunks of one stream joined (up to
        :data:`PIECE_BYTES`); the first piece's ``dropped`` counts the bytes from ``offset``
        no longer held (an empty piece carries it when nothing is)."""
        dropped = max(0, self.start - offset)
        offset += dropped
        if offset >= self.end:
            return [ProcessOutput(offset, b"", Stream.STDOUT, dropped)] if dropped else []
        i = max(self._head, bisect.bisect_right(self._offsets, offset, lo=self._head) - 1)
        pieces: list[ProcessOutput] = []
        parts: list[bytes] = []
        size, run_stream, run_start = 0, self._chunks[i][0], offset
        for stream, data in self._chunks[i:]:
            chunk = data[offset - self._offsets[i] :] if not parts and not pieces else data
            if parts and (stream is not run_stream or size + len(chunk) > PIECE_BYTES):
                pieces.append(ProcessOutput(run_start, b"".join(parts), run_stream, dropped))
                dropped, run_start, parts, size = 0, run_start + size, [], 0
            run_stream = stream
            parts.append(chunk)
            size += len(chunk)
        pieces.append(ProcessOutput(run_start, b"".join(parts), run_stream, dropped))
        return pieces


@dataclass(eq=False)
class _Record:
    """One started process: what is known of it, its ring, stdin and timers."""

    id: str
    owner: str | None
    command: str
    cwd: str
    started_at: float
    pty: PtySize | None
    live: LiveProcess
    ring: OutputRing
    stdin_fd: int
    idle_timeout: float | None
    state: ProcessState = ProcessState.RUNNING
    exit_code: int | None = None
    kill_reason: KillReason | None = None
    signal: int | None = None
    stdin_closed: bool = False
    stdin_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    timers: list[asyncio.TimerHandle] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    last_output: float = 0.0

    @property
    def running(self) -> bool:
        return self.state is ProcessState.RUNNING

    def info(self) -> ProcessInfo:
        return ProcessInfo(
            id=self.id,
            command=self.command,
            cwd=self.cwd,
            state=self.state,
            started_at=self.started_at,
            pty=self.pty,
            exit_code=self.exit_code,
            kill_reason=self.kill_reason,
            bytes_out=self.ring.end,
            signal=self.signal,
        )


async def _writable(fd: int, ended: asyncio.Event) -> bool:
    """Wait until ``fd`` can take a write; ``False`` if the process ended first."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[bool] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(True)

    loop.add_writer(fd, wake)
    ending: asyncio.Future[bool] = asyncio.ensure_future(ended.wait())
    try:
        await asyncio.wait([ready, ending], return_when=asyncio.FIRST_COMPLETED)
    finally:
        loop.remove_writer(fd)
        ending.cancel()
        ready.cancel()
    return not ended.is_set()


class ProcessTable:
    """The broker's processes that outlive a call, by id (see the module docstring).

    Args:
        policy: the ``[process]`` table (limits, ring size, lifetime, idle timeout, retention).
        manager: the broker's process manager, made on first use (``op`` names the call).
        open_cwd: opens a working directory beneath the root, asking the gate.
    """

    def __init__(
        self,
        policy: ProcessPolicy,
        manager: Callable[[str], ProcessManager],
        open_cwd: OpenCwd,
    ) -> None:
        self._policy = policy
        self._manager = manager
        self._open_cwd = open_cwd
        self._records: dict[str, _Record] = {}
        self._forget: dict[str, asyncio.TimerHandle] = {}
        self._closed = False

    # -- start --------------------------------------------------------------------------------

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
    ) -> ProcessInfo:
        op = "start_process"
        policy = self._policy
        lifetime = min(check_timeout(timeout, op, cwd) or policy.max_lifetime, policy.max_lifetime)
        idle = check_timeout(idle_timeout, op, cwd)
        if policy.idle_timeout is not None:
            idle = policy.idle_timeout if idle is None else min(idle, policy.idle_timeout)
        if pty is not None:
            _check_size(op, None, pty.cols, pty.rows)
        if self._closed:
            raise Unavailable(op, None, "the broker is closed")
        self._check_limits(op, cwd, owner)
        manager = self._manager(op)
        argv = bash_argv(command)
        child_env = {**MINIMAL_ENV, **(env or {})}
        if pty is not None:
            child_env.setdefault("TERM", PTY_TERM)
        cwd_fd = self._open_cwd(op, cwd, gate)
        try:
            live = manager.start(
                argv,
                cwd_fd=cwd_fd,
                cwd=cwd,
                env=child_env,
                pty=None if pty is None else (pty.cols, pty.rows),
            )
        finally:
            os.close(cwd_fd)
        loop = asyncio.get_running_loop()
        record = _Record(
            id=self._new_id(),
            owner=owner,
            command=command,
            cwd=cwd,
            started_at=time.time(),
            pty=pty,
            live=live,
            ring=OutputRing(policy.ring_bytes, backpressure=backpressure),
            stdin_fd=live.stdin_fd,
            idle_timeout=idle,
            last_output=loop.time(),
        )
        self._records[record.id] = record
        record.timers.append(loop.call_later(lifetime, live.kill, KillReason.TIMEOUT))
        if idle is not None:
            self._arm_idle(record)
        record.task = asyncio.create_task(self._supervise(record))
        return record.info()

    def _check_limits(self, op: str, cwd: str, owner: str | None) -> None:
        running = [r for r in self._records.values() if r.running]
        mine = sum(1 for r in running if r.owner == owner)
        per_principal, total = self._policy.max_per_principal, self._policy.max_total
        if mine >= per_principal:
            raise PolicyDenied(
                op,
                cwd,
                f"{mine} processes are running for this principal, the most it may have; "
                "kill one (kill_process) or wait for one to end, then start again",
                rule=f"process.max_per_principal: {per_principal}",
            )
        if len(running) >= total:
            raise PolicyDenied(
                op,
                cwd,
                f"{len(running)} processes are running on this broker, the most it may have; "
                "kill one (kill_process) or wait for one to end, then start again",
                rule=f"process.max_total: {total}",
            )

    def _new_id(self) -> str:
        while True:
            candidate = "p-" + secrets.token_hex(6)
            if candidate not in self._records:
                return candidate

    def _arm_idle(self, record: _Record) -> None:
        assert record.idle_timeout is not None
        loop = asyncio.get_running_loop()
        deadline = record.last_output + record.idle_timeout

        def check() -> None:
            if not record.running:
                return
            if record.ring.readers.waiting:  # output waits for a slow reader: not idle
                record.last_output = loop.time()
            if loop.time() >= record.last_output + record.idle_timeout - 1e-3:  # type: ignore[operator]
                record.live.kill(KillReason.IDLE_TIMEOUT)
            else:
                self._arm_idle(record)

        record.timers = [t for t in record.timers if not t.cancelled()]
        record.timers.append(loop.call_at(deadline, check))

    def _on_output(self, record: _Record, stream: Stream, data: bytes) -> None:
        record.last_output = asyncio.get_running_loop().time()
        record.ring.append(stream, data)

    async def _on_held_output(self, record: _Record, stream: Stream, data: bytes) -> None:
        """Output of a backpressure process: its pump (and so the process, once its pipe is
        full) waits until the ring has room. A process held so is not idle: it has output."""
        await record.ring.room(len(data))
        self._on_output(record, stream, data)

    async def _supervise(self, record: _Record) -> None:
        live = record.live
        streams = [Stream.STDOUT] if live.tty else [Stream.STDOUT, Stream.STDERR]
        deliver = self._on_held_output if record.ring.backpressure else self._on_output
        readers = [
            (fd, functools.partial(deliver, record, stream))
            for fd, stream in zip(live.read_fds, streams, strict=True)
        ]
        result = ExecResult(None, KillReason.ABORTED)
        try:
            result = await live.supervise(readers)
        finally:
            for timer in record.timers:
                timer.cancel()
            record.timers = []
            if result.kill_reason is not None:
                record.state, record.kill_reason = ProcessState.KILLED, result.kill_reason
            else:
                record.state = ProcessState.EXITED
                record.exit_code, record.signal = result.exit_code, result.signal
            record.ended.set()
            record.ring.notify()
            async with record.stdin_lock:  # a writer waiting on a full pipe has let go by now
                if record.stdin_fd >= 0:
                    os.close(record.stdin_fd)
                    record.stdin_fd = -1
            if not self._closed:
                self._forget[record.id] = asyncio.get_running_loop().call_later(
                    self._policy.retention, self._drop, record.id
                )

    def _drop(self, id: str) -> None:
        self._forget.pop(id, None)
        self._records.pop(id, None)

    # -- finding ------------------------------------------------------------------------------

    def _get(self, op: str, id: str, owner: str | None) -> _Record:
        record = self._records.get(id)
        if record is None or (owner is not None and record.owner != owner):
            raise NotFound(
                op,
                id,
                "no such process: the id is not one of yours, or it ended more than "
                f"{self._policy.retention:g} s ago (list_processes shows what is kept)",
            )
        return record

    async def list_processes(self, *, owner: str | None = None) -> list[ProcessInfo]:
        return [r.info() for r in self._records.values() if owner is None or r.owner == owner]

    # -- output -------------------------------------------------------------------------------

    def attach(
        self, id: str, *, from_offset: int = 0, owner: str | None = None
    ) -> AsyncIterator[ProcessOutput]:
        record = self._get("attach_process", id, owner)
        if (
            isinstance(from_offset, bool)
            or not isinstance(from_offset, int)
            or not 0 <= from_offset <= record.ring.end
        ):
            raise InvalidArgument(
                "attach_process",
                id,
                f"from_offset must be between 0 and the output so far ({record.ring.end}), "
                f"got {from_offset!r}",
            )
        return self._follow(record, from_offset)

    async def _follow(self, record: _Record, offset: int) -> AsyncIterator[ProcessOutput]:
        ring = record.ring
        reader = object()
        ring.readers.advance(reader, offset)
        try:
            while True:
                changed = ring.changed
                pieces = ring.read(offset)
                if pieces:
                    for piece in pieces:
                        yield piece
                        ring.readers.advance(reader, piece.offset + len(piece.data))  # taken
                    last = pieces[-1]
                    offset = last.offset + len(last.data)
                    continue
                if record.ended.is_set():
                    return
                await changed.wait()
        finally:
            ring.readers.leave(reader)

    # -- input, signals, size -----------------------------------------------------------------

    async def write_stdin(self, id: str, data: bytes, *, owner: str | None = None) -> None:
        op = "write_stdin"
        record = self._get(op, id, owner)
        async with record.stdin_lock:
            view = memoryview(data)
            while True:
                self._check_stdin(op, record)
                if not view:
                    return
                try:
                    written = os.write(record.stdin_fd, view)
                except BlockingIOError:
                    await _writable(record.stdin_fd, record.ended)
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.EPIPE, errno.EIO):
                        raise
                    raise InvalidArgument(op, id, "the process closed its stdin") from None
                view = view[written:]

    def _check_stdin(self, op: str, record: _Record) -> None:
        if record.stdin_closed:
            raise InvalidArgument(
                op, record.id, "stdin was closed (close_stdin); start the process again to feed it"
            )
        if record.ended.is_set() or record.stdin_fd < 0:
            raise InvalidArgument(op, record.id, "the process has ended; its stdin is closed")

    async def close_stdin(self, id: str, *, owner: str | None = None) -> None:
        """Close stdin; on a PTY, send the terminal's end-of-file (``^D``) instead, since the
        terminal stays the process's output."""
        record = self._get("close_stdin", id, owner)
        async with record.stdin_lock:
            if record.stdin_closed or record.stdin_fd < 0:
                record.stdin_closed = True
                return
            record.stdin_closed = True
            if record.pty is not None:
                with contextlib.suppress(OSError):
                    os.write(record.stdin_fd, _VEOF)
                return  # the fd stays open for resize; closed when the process ends
            os.close(record.stdin_fd)
            record.stdin_fd = -1

    async def signal(self, id: str, signal: int, *, owner: str | None = None) -> None:
        """Send ``signal`` to the process group (and a PTY's foreground job); nothing once the
        process has ended."""
        record = self._get("signal_process", id, owner)
        if (
            isinstance(signal, bool)
            or not isinstance(signal, int)
            or signal not in _signal.valid_signals()
        ):
            raise InvalidArgument("signal_process", id, f"not a signal number: {signal!r}")
        if record.running:
            record.live.signal(signal)

    async def resize(self, id: str, cols: int, rows: int, *, owner: str | None = None) -> None:
        op = "resize_process"
        record = self._get(op, id, owner)
        if record.pty is None:
            raise InvalidArgument(op, id, "the process has no terminal: start it with a pty")
        _check_size(op, id, cols, rows)
        async with record.stdin_lock:
            if record.stdin_fd >= 0:
                set_winsize(record.stdin_fd, cols, rows)
                record.pty = PtySize(cols, rows)

    # -- ending -------------------------------------------------------------------------------

    async def wait(self, id: str, *, owner: str | None = None) -> ProcessInfo:
        record = self._get("wait_process", id, owner)
        await record.ended.wait()
        return record.info()

    async def kill(self, id: str, *, owner: str | None = None) -> ProcessInfo:
        record = self._get("kill_process", id, owner)
        if record.running:
            record.live.kill(KillReason.KILLED)
        await record.ended.wait()
        return record.info()

    async def aclose(self) -> None:
        """Kill every running process (``KillReason.SHUTDOWN``), wait for the trees to be
        empty and forget every record."""
        self._closed = True
        tasks = []
        for record in self._records.values():
            if record.running:
                record.live.kill(KillReason.SHUTDOWN)
            if record.task is not None:
                tasks.append(record.task)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for timer in self._forget.values():
            timer.cancel()
        self._forget.clear()
        self._records.clear()


def _check_size(op: str, id: str | None, cols: int, rows: int) -> None:
    for value in (cols, rows):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_PTY_CELLS:
            raise InvalidArgument(
                op, id, f"a terminal size is 1 to {MAX_PTY_CELLS} cells: got {cols}x{rows}"
            )
