"""The memory backend's processes that outlive a call: scripted commands run in the background.

``ops.processes.start(command, cwd)`` runs the handler ``ops.commands`` has for ``command`` (the
same registrations, the same ``command not found``, the same virtual time as ``exec``) as a task
that outlives the call; its output goes into a ring of ``process.ring_bytes`` instead of to an
``on_data``. A harness can thus test an agent that starts a server and polls it::

    async def server(ctx):
        await ctx.emit("listening on :8000\\n")
        await ctx.sleep(3600)
        return 0
    ops.commands.register("npm run dev", server)
    info = await ops.processes.start("npm run dev", "/workspace")
    async for piece in ops.processes.attach(info.id): ...

The rules are the broker core's: ids ``p-`` and 12 hex digits; a process is seen only by its
``owner`` (``None`` sees every one); the ``[process]`` limits (running per principal and in
total, lifetime, idle timeout, ring, retention) in virtual seconds; ``kill``, the timeouts and
``aclose`` end a process with ``KillReason.KILLED``, ``TIMEOUT``/``IDLE_TIMEOUT`` and
``SHUTDOWN``. All output is ``Stream.STDOUT`` (a handler has one output).

A process started with ``pty=`` sees its size in ``ctx.terminal`` (``resize`` changes it and sends
``SIGWINCH``) and behaves as on a cooked terminal, so its bytes match a real PTY's: output leaves
with every ``\n`` as ``\r\n`` (``onlcr``) and what ``write_stdin`` sends is echoed. The
terminal's special characters are not interpreted: ``signal`` and ``close_stdin`` stand for
``^C`` and ``^D``.
"""

from __future__ import annotations

import asyncio
import secrets
import signal as signals
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ._abort import AbortController
from ._errors import InvalidArgument, NotFound, OpsError, PolicyDenied, Unavailable
from ._policy import ProcessPolicy
from ._processes import ProcessInfo, ProcessOutput, ProcessState, PtySize, RingReaders, Stream
from ._runner import ProcessIO
from ._timeout import check_timeout
from ._types import ExecResult, KillReason

if TYPE_CHECKING:
    from ._gate import Gate
    from ._memory import InMemoryOperations

__all__ = ["MemoryProcesses"]


class _Ring:
    """The last ``capacity`` bytes of an output, addressed by global offsets; with
    ``backpressure``, only bytes every reader has read are dropped (the core's ``OutputRing``)."""

    def __init__(self, capacity: int, *, backpressure: bool = False) -> None:
        self.capacity = capacity
        self.backpressure = backpressure
        self.data = bytearray()
        self.start = 0  # the offset of data[0]
        self.readers = RingReaders()

    @property
    def end(self) -> int:
        return self.start + len(self.data)

    async def room(self, size: int) -> None:
        """Wait until ``size`` more bytes fit without dropping a byte a reader has yet to read."""
        if self.backpressure:
            await self.readers.room(self, size, self.capacity)

    def append(self, chunk: bytes) -> None:
        self.data += chunk
        excess = len(self.data) - max(self.capacity, len(chunk) if self.backpressure else 0)
        if excess > 0:
            del self.data[:excess]
            self.start += excess

    def since(self, offset: int) -> bytes:
        return bytes(self.data[offset - self.start :])


@dataclass(eq=False)
class _Process:
    info: ProcessInfo
    owner: str | None
    io: ProcessIO
    ring: _Ring
    abort: AbortController = field(default_factory=AbortController)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    last_output: float = 0.0
    task: asyncio.Task[None] | None = None

    async def output(self, data: bytes) -> None:
        """The command's output: into the ring, once a backpressure ring has room for it."""
        data = self._terminal(data)
        await self.ring.room(len(data))
        self._append(data)

    def output_now(self, data: bytes) -> None:
        """Output that never waits (the terminal's echo, a handler's crash)."""
        self._append(self._terminal(data))

    def _terminal(self, data: bytes) -> bytes:
        return data if self.info.pty is None else data.replace(b"\n", b"\r\n")  # onlcr

    def _append(self, data: bytes) -> None:
        self.ring.append(data)
        self.info = replace(self.info, bytes_out=self.ring.end)
        self.last_output = asyncio.get_running_loop().time()
        self._notify()

    def _notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def finish(self, result: ExecResult) -> None:
        if result.kill_reason is not None:
            state, code = ProcessState.KILLED, None
        else:
            state, code = ProcessState.EXITED, result.exit_code
        self.info = replace(
            self.info,
            state=state,
            exit_code=code,
            kill_reason=result.kill_reason,
            signal=result.signal,
        )
        self.ended.set()
        self._notify()


class MemoryProcesses:
    """:class:`~operations.GatedProcessOperations` over the memory backend's scripted commands.

    Args:
        backend: the memory backend (its ``commands``, tree, clock and log).
        policy: the ``[process]`` limits; its seconds are virtual (``time_scale`` applies).
    """

    def __init__(self, backend: InMemoryOperations, policy: ProcessPolicy) -> None:
        self._backend = backend
        self.policy = policy
        self._processes: dict[str, _Process] = {}
        self._closed = False

    @property
    def _scale(self) -> float:
        return self._backend.commands.time_scale

    def _record(self, op: str, path: str, outcome: str, detail: str | None = None) -> None:
        self._backend._note(op, path, outcome, detail)

    def _find(self, op: str, id: str, owner: str | None) -> _Process:
        process = self._processes.get(id) if isinstance(id, str) else None
        if process is None or (owner is not None and process.owner != owner):
            error = NotFound(op, id, "no such process (ended longer ago than its retention?)")
            self._record(op, str(id), error.code)
            raise error
        return process

    def _running(self, owner: str | None = None, *, everyone: bool = False) -> int:
        return sum(
            1 for p in self._processes.values() if p.info.running and (everyone or p.owner == owner)
        )

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
        """Run ``command`` in the background (see the module docstring) and return it running.

        Raises:
            Unavailable: the backend is closed. NotFound / NotADirectory / EscapesRoot /
                PolicyDenied: the cwd, as ``exec`` checks it. InvalidArgument: a bad timeout or
                terminal size. PolicyDenied: ``process.max_per_principal`` or
                ``process.max_total`` processes are running.
        """
        op = "start_process"
        try:
            if self._closed:
                raise Unavailable(op, cwd, "the memory backend is closed")
            self._backend._directory(op, cwd, gate and gate.read)
            check_timeout(timeout, op, cwd)
            check_timeout(idle_timeout, op, cwd)
            if pty is not None and (pty.cols <= 0 or pty.rows <= 0):
                raise InvalidArgument(op, cwd, f"a terminal size must be positive, got {pty!r}")
            self._check_limits(op, cwd, owner)
        except OpsError as error:
            self._record(op, cwd, error.code, command)
            raise
        lifetime = min(timeout or self.policy.max_lifetime, self.policy.max_lifetime)
        idle = min(
            (t for t in (idle_timeout, self.policy.idle_timeout) if t is not None), default=None
        )
        id = f"p-{secrets.token_hex(6)}"
        info = ProcessInfo(
            id, command, cwd, ProcessState.RUNNING, self._backend.vfs.clock(), pty=pty
        )
        ring = _Ring(self.policy.ring_bytes, backpressure=backpressure)
        process = _Process(info, owner, ProcessIO(id, pty=pty), ring)
        process.last_output = asyncio.get_running_loop().time()
        self._processes[id] = process
        process.task = asyncio.create_task(
            self._run(process, env, lifetime, idle), name=f"started process {id} {command!r}"
        )
        self._record(op, cwd, "ok", command)
        return info

    def _check_limits(self, op: str, cwd: str, owner: str | None) -> None:
        mine, limit = self._running(owner), self.policy.max_per_principal
        if mine >= limit:
            raise PolicyDenied(
                op,
                cwd,
                f"{mine} processes are running for this principal, the most it may have; "
                "kill one (kill_process) or wait for one to end, then start again",
                rule=f"process.max_per_principal: {limit}",
            )
        total, limit = self._running(everyone=True), self.policy.max_total
        if total >= limit:
            raise PolicyDenied(
                op,
                cwd,
                f"{total} processes are running on this broker, the most it may have; "
                "kill one (kill_process) or wait for one to end, then start again",
                rule=f"process.max_total: {limit}",
            )

    async def _run(
        self,
        process: _Process,
        env: Mapping[str, str] | None,
        lifetime: float,
        idle: float | None,
    ) -> None:
        info = process.info
        loop = asyncio.get_running_loop()
        timer: asyncio.TimerHandle | None = None

        def check_idle() -> None:
            nonlocal timer
            assert idle is not None
            if process.ring.readers.waiting:  # output waits for a slow reader: not idle
                process.last_output = loop.time()
            quiet = loop.time() - process.last_output
            if quiet >= idle * self._scale:
                process.abort.abort(KillReason.IDLE_TIMEOUT)
            else:
                timer = loop.call_later(idle * self._scale - quiet, check_idle)

        if idle is not None:
            timer = loop.call_later(idle * self._scale, check_idle)
        try:
            result = await self._backend.commands.run(
                info.command,
                info.cwd,
                on_data=process.output,
                signal=process.abort.signal,
                timeout=lifetime,
                env=env,
                io=process.io,
            )
        except Exception as error:  # a handler's bug: shown as the shell shows a crash
            process.output_now(f"{type(error).__name__}: {error}\n".encode())
            result = ExecResult(1)
        finally:
            if timer is not None:
                timer.cancel()
            process.io.ended()
        process.finish(result)
        outcome = (
            f"killed:{result.kill_reason.value}"
            if result.kill_reason is not None
            else f"signal:{result.signal}"
            if result.signal is not None
            else f"exit:{result.exit_code}"
        )
        self._record("process_exit", info.id, outcome, info.command)
        loop.call_later(self.policy.retention * self._scale, self._forget, process)

    def _forget(self, process: _Process) -> None:
        if self._processes.get(process.info.id) is process:
            del self._processes[process.info.id]

    async def attach(
        self, id: str, *, from_offset: int = 0, owner: str | None = None
    ) -> AsyncIterator[ProcessOutput]:
        """Replay from ``from_offset``, then follow; ends once the process has ended and all its
        output was delivered. Closing the iterator leaves the process running.

        Raises:
            NotFound: not the caller's process, or no longer retained. InvalidArgument:
                ``from_offset`` is negative or past the output produced so far.
        """
        op = "attach_process"
        process = self._find(op, id, owner)
        if (
            isinstance(from_offset, bool)
            or not isinstance(from_offset, int)
            or not 0 <= from_offset <= process.ring.end
        ):
            self._record(op, id, InvalidArgument.code)
            raise InvalidArgument(
                op,
                id,
                f"from_offset must be between 0 and the output so far ({process.ring.end}), "
                f"got {from_offset!r}",
            )
        self._record(op, id, "ok", str(from_offset))
        offset = from_offset
        ring, reader = process.ring, object()
        ring.readers.advance(reader, offset)
        try:
            while True:
                dropped = max(0, ring.start - offset)
                offset += dropped
                if offset < ring.end:
                    data = ring.since(offset)
                    yield ProcessOutput(offset, data, Stream.STDOUT, dropped)
                    offset += len(data)
                    ring.readers.advance(reader, offset)  # taken
                    continue
                if process.ended.is_set():
                    return
                await process.changed.wait()
        finally:
            ring.readers.leave(reader)

    async def write_stdin(self, id: str, data: bytes, *, owner: str | None = None) -> None:
        """Feed the process's stdin (waits while its pipe is full).

        Raises:
            NotFound: see :meth:`attach`. InvalidArgument: stdin was closed or the process ended.
        """
        op = "write_stdin"
        process = self._find(op, id, owner)
        try:
            await process.io.write(data)
        except InvalidArgument as error:
            self._record(op, id, error.code, f"{len(data)} bytes")
            raise
        if process.info.pty is not None and data:
            process.output_now(data)  # the terminal echoes its input
        self._record(op, id, "ok", f"{len(data)} bytes")

    async def close_stdin(self, id: str, *, owner: str | None = None) -> None:
        """End the process's input (``cat`` then exits). Idempotent."""
        process = self._find("close_stdin", id, owner)
        process.io.close()
        self._record("close_stdin", id, "ok")

    async def signal(self, id: str, signal: int, *, owner: str | None = None) -> None:
        """Deliver ``signal``: a handler that has not trapped it ends with ``128 + signal``
        (those that are ignored by default, ``SIGWINCH`` or ``SIGCHLD``, do nothing); an ended
        process is left as it is.

        Raises:
            NotFound: see :meth:`attach`. InvalidArgument: not a signal number.
        """
        op = "signal_process"
        process = self._find(op, id, owner)
        if (
            isinstance(signal, bool)
            or not isinstance(signal, int)
            or signal not in signals.valid_signals()
        ):
            self._record(op, id, InvalidArgument.code, repr(signal))
            raise InvalidArgument(op, id, f"not a signal number: {signal!r}")
        if process.info.running:
            process.io.signal(signal)
        self._record(op, id, "ok", str(signal))

    async def resize(self, id: str, cols: int, rows: int, *, owner: str | None = None) -> None:
        """Record the new terminal size (``ProcessInfo.pty``, ``ctx.terminal``) and send
        ``SIGWINCH``.

        Raises:
            NotFound: see :meth:`attach`. InvalidArgument: no PTY, or a size that is not positive.
        """
        op = "resize_process"
        process = self._find(op, id, owner)
        if process.info.pty is None:
            self._record(op, id, InvalidArgument.code)
            raise InvalidArgument(op, id, "the process has no terminal; start it with pty=...")
        if any(isinstance(n, bool) or not isinstance(n, int) or n <= 0 for n in (cols, rows)):
            self._record(op, id, InvalidArgument.code)
            raise InvalidArgument(
                op, id, f"a terminal size must be positive, got {cols!r}x{rows!r}"
            )
        size = PtySize(cols, rows)
        process.info = replace(process.info, pty=size)
        process.io.pty = size
        if process.info.running:
            process.io.signal(signals.SIGWINCH)
        self._record(op, id, "ok", f"{cols}x{rows}")

    async def list_processes(self, *, owner: str | None = None) -> list[ProcessInfo]:
        """The caller's processes, running and retained finished ones, oldest first."""
        return [p.info for p in self._processes.values() if owner is None or p.owner == owner]

    async def wait(self, id: str, *, owner: str | None = None) -> ProcessInfo:
        """Wait (in virtual time) until the process has ended; its final record.

        **Cancellation:** cancelling the wait leaves the process running.
        """
        process = self._find("wait_process", id, owner)
        await process.ended.wait()
        return process.info

    async def kill(self, id: str, *, owner: str | None = None) -> ProcessInfo:
        """Kill the process (``KillReason.KILLED``) and return its final record; an ended one is
        returned as it is.

        **Cancellation:** the process is killed all the same; only the wait for its end stops.
        """
        process = self._find("kill_process", id, owner)
        process.abort.abort(KillReason.KILLED)
        await process.ended.wait()
        self._record("kill_process", id, "ok")
        return process.info

    async def aclose(self) -> None:
        """Kill every running process (``KillReason.SHUTDOWN``) and wait until they have ended;
        ``start`` then raises ``Unavailable``. Records stay readable."""
        self._closed = True
        running = [
            p for p in self._processes.values() if p.task is not None and not p.ended.is_set()
        ]
        for process in running:
            process.abort.abort(KillReason.SHUTDOWN)
        for process in running:
            await process.ended.wait()
