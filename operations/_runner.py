"""The memory backend's scripted command runner: registered handlers instead of a shell.

A harness registers what each command does::

    ops.commands.register("make test", output="ok\\n")                 # fixed output, exit 0
    ops.commands.register(re.compile(r"exit (\\d+)"), lambda ctx: int(ctx.match[1]))
    async def slow(ctx):                                               # output over time
        for i in range(3):
            await ctx.emit(f"{i}\\n")
            await ctx.sleep(1)
        return 0
    ops.commands.register(lambda c: c.startswith("slow"), slow)

Matching: the most recently registered matcher that accepts the command wins; a string must equal
the command, a compiled pattern must ``fullmatch`` it (``ctx.match`` holds the match), a callable
is a predicate. An unmatched command behaves as a missing program does in ``bash -c``: the output
is ``bash: <word>: command not found`` (``bash: line 1: <word>: ...`` when the command is a list
or pipeline, as bash 5 prints it) and the exit code 127.

Kills behave as on the broker: a handler still running when the timeout expires, the signal
aborts, the output limit is passed or the backend closes is cancelled (its ``finally`` clauses
run), and ``exec`` returns ``ExecResult(None, KillReason.X)``; a cancelled caller gets
:class:`asyncio.CancelledError` after the handler is gone. ``ctx.emit`` always yields to the
event loop, so even a handler that only emits can be killed. ``time_scale`` multiplies both
``ctx.sleep`` and timeouts, so a script written in seconds runs in milliseconds with the same
outcome (``time_scale=0.001``).

A started process (:mod:`operations._memory_processes`) is the same run in the background, given
a :class:`ProcessIO`: ``ctx.read()`` reads its stdin (``b""`` at end of input; an ``exec`` has
none, as with ``/dev/null``), and a signal ends it with exit code ``128 + n`` as bash reports,
unless the handler traps it (``ctx.trap``) and takes it with ``ctx.next_signal()``. A bare
``cat`` that no registration matches is built in: it copies stdin to its output until stdin is
closed.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import signal as signals
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._abort import AbortSignal
from ._errors import InvalidArgument
from ._processes import PtySize
from ._types import ExecResult, KillReason, OnData

__all__ = ["CommandContext", "CommandRunner", "Handler", "Matcher", "ProcessIO"]

PIPE_BYTES = 64 * 1024
"""What a started process's stdin holds before ``write_stdin`` waits (Linux's pipe size)."""

IGNORED_BY_DEFAULT = frozenset(
    {
        signals.SIGCHLD,
        signals.SIGCONT,
        signals.SIGURG,
        signals.SIGWINCH,
        # A scripted process cannot be stopped; the stop signals are ignored.
        signals.SIGSTOP,
        signals.SIGTSTP,
        signals.SIGTTIN,
        signals.SIGTTOU,
    }
)
"""Signals that do not end a process that has not trapped them."""


class ProcessIO:
    """What a started process has beyond an ``exec``: a stdin pipe, signals and a terminal.

    ``write`` waits while the pipe holds :data:`PIPE_BYTES`; once the run has ended, ``write``
    raises :class:`~operations.InvalidArgument`, as it does after ``close``.
    """

    def __init__(self, op_id: str, *, pty: PtySize | None = None) -> None:
        self.id = op_id
        self.pty = pty
        self._buffer = bytearray()
        self._closed = False
        self._ended = False
        self._changed = asyncio.Event()
        self._trapped: set[int] = set()
        self._signals: asyncio.Queue[int] = asyncio.Queue()
        self._end: Callable[[int], None] | None = None
        self._pending: int | None = None

    @property
    def stdin_closed(self) -> bool:
        return self._closed or self._ended

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def write(self, data: bytes) -> None:
        """Append ``data`` to stdin, waiting while the pipe is full."""
        view = memoryview(data)
        while True:
            if self._ended:
                raise InvalidArgument("write_stdin", self.id, "the process has ended")
            if self._closed:
                raise InvalidArgument("write_stdin", self.id, "stdin was closed (close_stdin)")
            room = PIPE_BYTES - len(self._buffer)
            if room > 0:
                self._buffer += view[:room]
                view = view[room:]
                self._notify()
            if not view:
                return
            await self._changed.wait()

    def close(self) -> None:
        """End of input: the reader gets ``b""`` once the pipe is empty."""
        self._closed = True
        self._notify()

    async def read(self, size: int = PIPE_BYTES) -> bytes:
        """Up to ``size`` bytes of stdin, waiting for some; ``b""`` once closed and drained."""
        while not self._buffer:
            if self._closed:
                return b""
            await self._changed.wait()
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        self._notify()
        return data

    def signal(self, signum: int) -> None:
        """Deliver ``signum``: queued if trapped, else the run ends by it (``signal=signum``)."""
        if signum in self._trapped:
            self._signals.put_nowait(signum)
        elif signum in IGNORED_BY_DEFAULT or self._ended:
            return
        elif self._end is not None:
            self._end(signum)
        elif self._pending is None:  # the run has not begun: it ends as soon as it does
            self._pending = signum

    def ended(self) -> None:
        """The run is over: writers waiting on a full pipe are told so."""
        self._ended = True
        self._notify()


Matcher = str | re.Pattern[str] | Callable[[str], bool]
"""What a registration matches: an exact command, a pattern (fullmatch), or a predicate."""


@dataclass
class CommandContext:
    """What a handler sees: the command, where and with what environment it runs, and a way
    to produce output. ``backend`` is the memory backend, so a handler may change its files."""

    command: str
    cwd: str
    env: dict[str, str]
    match: re.Match[str] | None
    backend: Any
    _emit: Callable[[bytes], Awaitable[None]] = field(repr=False)
    _time_scale: float = field(repr=False, default=1.0)
    _io: ProcessIO | None = field(repr=False, default=None)

    @property
    def terminal(self) -> PtySize | None:
        """The terminal size of a process started with a PTY (it follows ``resize``)."""
        return self._io.pty if self._io is not None else None

    async def read(self, size: int = PIPE_BYTES) -> bytes:
        """Up to ``size`` bytes of stdin; ``b""`` at end of input (always, for an ``exec``)."""
        return b"" if self._io is None else await self._io.read(size)

    def trap(self, *signums: int) -> None:
        """Handle these signals instead of ending on them (``SIGKILL`` cannot be trapped)."""
        if self._io is not None:
            self._io._trapped.update(s for s in signums if s != signals.SIGKILL)

    async def next_signal(self) -> int:
        """Wait for the next trapped signal (for an ``exec``: never)."""
        if self._io is None:
            await asyncio.Event().wait()
        assert self._io is not None
        return await self._io._signals.get()

    async def emit(self, data: bytes | str) -> None:
        """Send output (``str`` is encoded as UTF-8); waits for a slow consumer."""
        await self._emit(data.encode() if isinstance(data, str) else data)

    async def sleep(self, seconds: float) -> None:
        """Let ``seconds`` of (scaled) time pass."""
        await asyncio.sleep(max(0.0, seconds) * self._time_scale)


Handler = Callable[[CommandContext], Awaitable[int] | int]
"""Runs one command; returns its exit code (an ``int``, or an awaitable of one)."""


def _first_word(command: str) -> str:
    words = command.split()
    return words[0] if words else ""


_SHELL_OPERATORS = (";", "&", "|", "\n", "(", ")", "`", "$(")


def _bash_not_found(command: str) -> tuple[bytes, int]:
    # ``bash -c`` execs a lone simple command directly and names no line; with a list or a
    # pipeline it reports "line 1:". Both are reproduced, byte for byte.
    where = "line 1: " if any(op in command for op in _SHELL_OPERATORS) else ""
    return f"bash: {where}{_first_word(command)}: command not found\n".encode(), 127


def _powershell_not_found(command: str) -> tuple[bytes, int]:
    word = _first_word(command)
    return (
        f"{word}: The term '{word}' is not recognized as a name of a cmdlet, function, "
        "script file, or executable program.\n"
    ).encode(), 1


class CommandRunner:
    """A registry of scripted commands, and the ``exec`` that runs them."""

    def __init__(
        self,
        backend: Any = None,
        *,
        shell: str = "bash",
        time_scale: float = 1.0,
    ) -> None:
        if shell not in ("bash", "powershell"):
            raise ValueError(f"shell must be 'bash' or 'powershell', not {shell!r}")
        self.backend = backend
        self.shell = shell
        self.time_scale = time_scale
        self._handlers: list[tuple[Matcher, Handler]] = []
        self._running: set[Callable[[KillReason], None]] = set()
        self.history: list[str] = []
        """Every command run, in order (including unmatched ones)."""

    def register(
        self,
        matcher: Matcher,
        handler: Handler | None = None,
        *,
        output: bytes | str = b"",
        exit_code: int = 0,
    ) -> None:
        """Make commands that ``matcher`` accepts run ``handler``; without a handler, print
        ``output`` and exit with ``exit_code``."""
        if handler is None:
            data = output.encode() if isinstance(output, str) else output

            async def fixed(ctx: CommandContext) -> int:
                if data:
                    await ctx.emit(data)
                return exit_code

            handler = fixed
        self._handlers.append((matcher, handler))

    def clear(self) -> None:
        """Forget every registration."""
        self._handlers.clear()

    def _find(self, command: str) -> tuple[Handler, re.Match[str] | None] | None:
        for matcher, handler in reversed(self._handlers):
            if isinstance(matcher, str):
                if matcher == command:
                    return handler, None
            elif isinstance(matcher, re.Pattern):
                found = matcher.fullmatch(command)
                if found is not None:
                    return handler, found
            elif matcher(command):
                return handler, None
        return None

    async def run(
        self,
        command: str,
        cwd: str,
        *,
        on_data: OnData,
        signal: AbortSignal | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        max_output_bytes: int | None = None,
        io: ProcessIO | None = None,
    ) -> ExecResult:
        """Run ``command`` (see the module docstring). ``timeout`` <= 0 or ``None``: none.

        ``io`` makes it a started process: its stdin, signals and terminal (see
        :class:`ProcessIO`); a signal that ends it gives ``ExecResult(None, signal=n)``.
        """
        self.history.append(command)
        if signal is not None and signal.aborted:
            return ExecResult(None, signal.kill_reason)
        loop = asyncio.get_running_loop()
        emitted = 0
        kill_reason: KillReason | None = None
        signalled: int | None = None
        task: asyncio.Task[int] | None = None

        def kill(reason: KillReason) -> None:
            nonlocal kill_reason
            if kill_reason is None and signalled is None and task is not None and not task.done():
                kill_reason = reason
                task.cancel()

        def end(signum: int) -> None:
            nonlocal signalled
            if kill_reason is None and signalled is None and task is not None and not task.done():
                signalled = signum
                task.cancel()

        async def emit(data: bytes) -> None:
            nonlocal emitted
            if max_output_bytes is not None and emitted + len(data) > max_output_bytes:
                data = data[: max(0, max_output_bytes - emitted)]
                if data:
                    emitted += len(data)
                    await _deliver(on_data, data)
                kill(KillReason.OUTPUT_LIMIT)
            elif data:
                emitted += len(data)
                await _deliver(on_data, data)
            await asyncio.sleep(0)

        found = self._find(command)
        if found is None and command.strip() == "cat":
            found = _cat, None
        if found is None:
            not_found = _bash_not_found if self.shell == "bash" else _powershell_not_found
            message, code = not_found(command)

            async def missing(ctx: CommandContext) -> int:
                await ctx.emit(message)
                return code

            handler: Handler = missing
            match: re.Match[str] | None = None
        else:
            handler, match = found
        if not command.strip():
            handler, match = _empty_command, None
        context = CommandContext(
            command, cwd, dict(env or {}), match, self.backend, emit, self.time_scale, io
        )
        task = asyncio.create_task(_invoke(handler, context), name=f"scripted command {command!r}")
        if io is not None:
            io._end = end
            if io._pending is not None:
                end(io._pending)
        self._running.add(kill)
        remove_listener = None
        if signal is not None:

            def on_abort() -> None:
                loop.call_soon_threadsafe(kill, signal.kill_reason)

            remove_listener = signal.add_listener(on_abort)
        timer = None
        if timeout is not None and timeout > 0:
            timer = loop.call_later(timeout * self.time_scale, kill, KillReason.TIMEOUT)
        try:
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError:
                kill(KillReason.ABORTED)
                await _wait_uninterrupted(task)
                raise
        finally:
            self._running.discard(kill)
            if io is not None:
                io._end = None
                io.ended()
            if timer is not None:
                timer.cancel()
            if remove_listener is not None:
                remove_listener()
        if task.cancelled():
            if signalled is not None:
                return ExecResult(None, signal=signalled)
            return ExecResult(None, kill_reason or KillReason.ABORTED)
        return ExecResult(task.result())

    async def shutdown(self) -> None:
        """Kill every running command (``KillReason.SHUTDOWN``)."""
        for kill in list(self._running):
            kill(KillReason.SHUTDOWN)
        await asyncio.sleep(0)


async def _empty_command(ctx: CommandContext) -> int:
    return 0


async def _cat(ctx: CommandContext) -> int:
    """``cat`` with no file: stdin to the output until end of input."""
    while data := await ctx.read():
        await ctx.emit(data)
    return 0


async def _invoke(handler: Handler, context: CommandContext) -> int:
    result = handler(context)
    if inspect.isawaitable(result):
        result = await result
    if not isinstance(result, int):
        raise TypeError(f"handler for {context.command!r} returned {result!r}, not an exit code")
    return result


async def _deliver(on_data: OnData, data: bytes) -> None:
    result = on_data(data)
    if result is not None:
        await result


async def _wait_uninterrupted(task: asyncio.Task[int]) -> None:
    """Wait for ``task`` to end even if we are cancelled again meanwhile."""
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            continue
