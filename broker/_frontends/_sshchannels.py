"""The channels of the SSH front-end, one class per kind.

A channel becomes what its first request asks for: the ``opsbroker`` subsystem
(:class:`FrameChannel`: framed calls of the one service table), a command (:class:`CommandChannel`:
``ssh host 'make test'``, run as the service's ``Run``), ``sftp`` (:class:`SftpChannel`), a
terminal session (:class:`PtyChannel`: ``ssh -t host [COMMAND]``, a process started on a PTY), or
a shell without a terminal, which is refused (:class:`RefusedShell`). :class:`Channel` is the
asyncssh session that picks the kind and hands every later event to it.

**Cancellation:** closing a channel, an SSH ``signal`` request on it (on a terminal session: the
signal is sent to the process instead), a ``CANCEL`` frame, or the loss of the connection cancels
the channel's running call; the backend then kills the command tree before the call ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal as _signal
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Final, cast

import asyncssh
from asyncssh.stream import SSHServerStreamSession
from google.protobuf.message import Message as ProtoMessage
from opsbroker.v1 import broker_pb2 as pb
from opsbroker.v1.codec import exit_from_wire
from opsbroker.v1.sshframe import (
    SUBSYSTEM,
)

from operations import (
    Backend,
    InvalidArgument,
    KillReason,
    OpsError,
    ProcessInfo,
    ProcessOperations,
    PtySize,
)

from ._frames import COALESCE_BYTES, INBOUND_HIGH_WATER, INBOUND_LOW_WATER, FrameServer
from ._sftp import BackendSFTPServer

if TYPE_CHECKING:
    from .ssh import _BrokerServer

__all__ = [
    "COALESCE_BYTES",
    "EXIT_KILLED",
    "EXIT_TIMEOUT",
    "NO_SHELL_MESSAGE",
    "SHELL_COMMAND",
    "Channel",
]

log = logging.getLogger("opsbroker.ssh")

NO_SHELL_MESSAGE: Final = (
    "opsbroker: interactive shells are not offered without a terminal. Ask for one "
    "(ssh -t HOST), run a command (ssh HOST 'COMMAND'), or use sftp or the opsbroker "
    "subsystem.\r\n"
)

SHELL_COMMAND: Final = 'exec "${BASH:-sh}" ${BASH:+--norc --noprofile} -i'
"""What ``ssh -t host`` (no command) runs: an interactive bash (``sh`` where there is none), without
the broker account's dotfiles, since the session's environment is the policy's."""

MAX_TERM_CELLS: Final = 0xFFFF
"""A requested terminal dimension is clamped to this (the kernel's ``winsize`` is 16-bit)."""

SFTP_VERSION: Final = 3
"""The SFTP protocol version offered: v3 is what OpenSSH speaks (later versions add nothing
this server would serve)."""

INPUT_NOT_DELIVERED: Final = (
    b"opsbroker: input to this command is not delivered: `ssh host COMMAND` runs it with stdin "
    b"at /dev/null (for interactive input use `ssh -t host COMMAND`; to copy files, sftp)\r\n"
)
"""Written once to a plain command's stderr when its client sends input: never lost silently."""

EXIT_TIMEOUT: Final = 124
"""Exit status of a command killed for its timeout (as coreutils ``timeout`` reports it)."""

EXIT_KILLED: Final = 137
"""Exit status of a command killed for any other reason (128 + SIGKILL)."""


class _Kind:
    """What a channel is, once it knows: the hooks it forwards, and its one running task."""

    def __init__(self, server: _BrokerServer, chan: asyncssh.SSHServerChannel[bytes]) -> None:
        self.server = server
        self.chan = chan
        self.writable = asyncio.Event()
        self.writable.set()
        self.task: asyncio.Task[None] | None = None
        self.cancel_requested = False

    def started(self) -> None: ...

    def data(self, data: bytes, datatype: asyncssh.DataType) -> None:
        """Input on the channel; dropped unless the kind reads it (a command's stdin is
        /dev/null)."""

    def eof(self) -> bool:
        return True

    def signal(self) -> None:
        log.info("signal request on a channel: cancelling its call")
        self.cancel_requested = True
        self.cancel_soon()

    def pause(self) -> None:
        self.writable.clear()

    def resume(self) -> None:
        self.writable.set()

    def lost(self, exc: Exception | None) -> None:
        self.cancel_requested = False
        self.cancel()
        self.writable.set()

    def start(self, coro: Coroutine[object, object, None]) -> None:
        assert self.task is None
        self.task = task = asyncio.ensure_future(coro)
        calls = self.server.frontend._calls
        calls.add(task)
        task.add_done_callback(calls.discard)

    def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def cancel_soon(self) -> None:
        """Cancel the running call once it has started (so that it can still answer END)."""
        asyncio.get_running_loop().call_soon(self.cancel)

    async def drain(self) -> None:
        await self.writable.wait()
        if self.chan.is_closing():
            raise BrokenPipeError("channel closed")


class RefusedShell(_Kind):
    """``ssh host`` alone: no interactive shell, a message saying what to do instead."""

    def started(self) -> None:
        self.chan.write_stderr(NO_SHELL_MESSAGE.encode())
        self.chan.exit(1)


class CommandChannel(_Kind):
    """``ssh host 'COMMAND'``: the service's ``Run`` in the root, output on stdout, the exit
    status returned (124 for a timeout, 137 for any other kill). Its stdin is ``/dev/null``:
    input the client sends is not delivered, and the client is told so once, on stderr."""

    def __init__(
        self, server: _BrokerServer, chan: asyncssh.SSHServerChannel[bytes], command: str
    ) -> None:
        super().__init__(server, chan)
        self.command = command
        self.input_refused = False

    def started(self) -> None:
        self.start(self._run())

    def data(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if data and not self.input_refused and not self.chan.is_closing():
            self.input_refused = True
            self.chan.write_stderr(INPUT_NOT_DELIVERED)

    async def _run(self) -> None:
        server, chan = self.server, self.chan
        timeout = server.frontend.options.command_timeout
        request = pb.ExecRequest(command=self.command, cwd=server.ops.root, timeout=timeout)
        call = _CommandCall(self)
        try:
            await server.frontend.service.Run(request, call)
        except OpsError as exc:
            chan.write_stderr(f"opsbroker: {exc}\r\n".encode())
            chan.exit(1)
            return
        except asyncio.CancelledError:
            if self.cancel_requested and not chan.is_closing():
                chan.write_stderr(b"opsbroker: command killed by a signal request\r\n")
                chan.exit(EXIT_KILLED)
            raise
        finally:
            self.task = None
        _report_end(chan, call.exit_code, call.kill_reason, call.signal)


def _report_end(
    chan: asyncssh.SSHServerChannel[bytes],
    exit_code: int | None,
    reason: KillReason | None,
    signal: int | None,
) -> None:
    """Send how a command or terminal process ended: its exit status, the signal that ended it
    (an SSH ``exit-signal``: OpenSSH then exits 255 and says so), or, when the broker killed the
    tree, a line saying why and 124 (timeout) or 137."""
    if exit_code is not None:
        chan.exit(exit_code & 0xFF)
        return
    if signal is not None and reason is None:
        try:
            name = _signal.Signals(signal).name.removeprefix("SIG")
        except ValueError:
            name = str(signal)
        chan.exit_with_signal(name)
        return
    shown = reason.value if reason else "unknown"
    chan.write_stderr(f"opsbroker: command killed ({shown})\r\n".encode())
    chan.exit(EXIT_TIMEOUT if reason is KillReason.TIMEOUT else EXIT_KILLED)


class _CommandCall:
    """The :class:`~._service.Call` of a plain command: output to stdout, the exit kept."""

    def __init__(self, channel: CommandChannel) -> None:
        self._channel = channel
        self.ops: Backend = channel.server.ops
        self.principal = channel.server.principal
        self.subject: str | None = None
        self.exit_code: int | None = None
        self.kill_reason: KillReason | None = None
        self.signal: int | None = None

    async def send(self, message: ProtoMessage) -> None:
        assert isinstance(message, pb.ExecEvent)
        if message.WhichOneof("event") == "output":
            self._channel.chan.write(message.output)
            await self._channel.drain()
        else:
            result = exit_from_wire(message.exit)
            self.exit_code, self.kill_reason = result.exit_code, result.kill_reason
            self.signal = result.signal

    async def receive(self) -> ProtoMessage | None:
        return None

    async def discard_input(self) -> None:
        return None


_Input = bytes | PtySize | _signal.Signals | None
"""What a terminal session hands its process, in order: input, a resize, a signal, end of input."""


class PtyChannel(_Kind):
    """``ssh -t host [COMMAND]``: the command (an interactive shell without one) started on a
    pseudo-terminal through the connection's ``processes``, exactly as ``start(pty=...)``.

    So it has what every started process has: the cwd at the root, the policy's environment
    (``TERM`` from the client's request), the sandbox, the tracked tree, the policy's limits
    (``process.max_lifetime``; a session counts against ``process.max_per_principal``) and the
    audit. Channel input is its terminal input, in order; a window change resizes the terminal;
    the client's end of input is the terminal's ``^D``; an SSH ``signal`` request is sent to the
    process group. The exit status goes back to the client (124 or 137 with a line when the broker
    killed the tree).

    **Cancellation:** the channel closing, or the connection dropping, kills the process's tree
    (``kill``, the one kill path) before the channel's task ends.
    """

    def __init__(
        self,
        server: _BrokerServer,
        chan: asyncssh.SSHServerChannel[bytes],
        command: str | None,
        term: str,
        size: PtySize,
    ) -> None:
        super().__init__(server, chan)
        self.command = SHELL_COMMAND if command is None else command
        self.term = term
        self.size = size
        self.processes: ProcessOperations = server.ops.processes
        self.id: str | None = None
        self.input: asyncio.Queue[_Input] = asyncio.Queue()
        self._read_paused = False

    def started(self) -> None:
        self.start(self._run())

    def data(self, data: bytes, datatype: asyncssh.DataType) -> None:
        self._queue(data)

    def eof(self) -> bool:
        self._queue(None)
        return True  # half open: the terminal is still the process's output

    def resized(self, size: PtySize) -> None:
        self._queue(size)

    def signal_named(self, name: str) -> None:
        number = getattr(_signal, f"SIG{name}", None)
        if isinstance(number, _signal.Signals):
            self._queue(number)

    def _queue(self, item: _Input) -> None:
        self.input.put_nowait(item)
        if self.input.qsize() >= INBOUND_HIGH_WATER and not self._read_paused:
            self._read_paused = True
            self.chan.pause_reading()

    async def _run(self) -> None:
        chan, processes = self.chan, self.processes
        try:
            info = await processes.start(
                self.command,
                self.server.ops.root,
                env={"TERM": self.term} if self.term else None,
                pty=self.size,
                backpressure=True,  # as sshd: a slow client slows the session, loses nothing
            )
        except OpsError as exc:
            chan.write_stderr(f"opsbroker: {exc}\r\n".encode())
            chan.exit(1)
            self.task = None
            return
        self.id = info.id
        feeder = asyncio.ensure_future(self._feed(info.id))
        try:
            async for output in processes.attach(info.id):
                if output.data:
                    chan.write(output.data)
                    await self.drain()
            final = await processes.wait(info.id)
        except BaseException:
            await _finish(processes.kill(info.id))
            raise
        finally:
            feeder.cancel()
            self.task = None
        if not chan.is_closing():
            _report_end_of(chan, final)

    async def _feed(self, id: str) -> None:
        """Apply terminal input, resizes, signals and the end of input in the order they came."""
        processes = self.processes
        while True:
            item = await self.input.get()
            if self._read_paused and self.input.qsize() <= INBOUND_LOW_WATER:
                self._read_paused = False
                self.chan.resume_reading()
            if isinstance(item, PtySize):
                await self._quietly(processes.resize(id, item.cols, item.rows))
            elif isinstance(item, _signal.Signals):
                await self._quietly(processes.signal(id, item))
            elif item is None:
                await self._quietly(processes.close_stdin(id))
            else:
                await self._quietly(processes.write_stdin(id, item))

    @staticmethod
    async def _quietly(call: Coroutine[object, object, None]) -> None:
        """Input to a process that has just ended is dropped, as a terminal would drop it."""
        with contextlib.suppress(InvalidArgument):
            await call


def _report_end_of(chan: asyncssh.SSHServerChannel[bytes], info: ProcessInfo) -> None:
    _report_end(chan, info.exit_code, info.kill_reason, info.signal)


async def _finish(kill: Coroutine[object, object, ProcessInfo]) -> None:
    """Run ``kill`` to the end even if the caller is cancelled again meanwhile."""
    task = asyncio.ensure_future(kill)
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    with contextlib.suppress(asyncio.CancelledError, OpsError):
        await asyncio.shield(task)


class SftpChannel(_Kind):
    """The ``sftp`` subsystem, served by the connection's backend (:mod:`._sftp`)."""

    def __init__(self, server: _BrokerServer, chan: asyncssh.SSHServerChannel[bytes]) -> None:
        super().__init__(server, chan)
        backend = server.ops
        self.session: SSHServerStreamSession[bytes] = SSHServerStreamSession(
            None,
            lambda chan: BackendSFTPServer(
                cast("asyncssh.SSHServerChannel[bytes]", chan), backend, drain=self.writable.wait
            ),
            SFTP_VERSION,
        )
        self.session.connection_made(chan)

    def started(self) -> None:
        self.session.session_started()

    def data(self, data: bytes, datatype: asyncssh.DataType) -> None:
        self.session.data_received(data, datatype)

    def eof(self) -> bool:
        return bool(self.session.eof_received())

    def pause(self) -> None:
        super().pause()
        self.session.pause_writing()

    def resume(self) -> None:
        super().resume()
        self.session.resume_writing()

    def lost(self, exc: Exception | None) -> None:
        self.session.connection_lost(exc)
        super().lost(exc)


class FrameChannel(_Kind):
    """The ``opsbroker`` subsystem: framed calls of ``service Broker``, one at a time
    (:class:`~._frames.FrameServer`, with this channel as its carrier)."""

    def __init__(self, server: _BrokerServer, chan: asyncssh.SSHServerChannel[bytes]) -> None:
        super().__init__(server, chan)
        assert server.principal is not None
        self.frames = FrameServer(
            self,
            server.frontend.service,
            server.ops,
            server.principal,
            max_frame_size=server.frontend.options.max_frame_size,
            calls=server.frontend._calls,
            log=log,
        )

    def data(self, data: bytes, datatype: asyncssh.DataType) -> None:
        self.frames.data(data)

    def eof(self) -> bool:
        self.frames.eof()
        return True

    def signal(self) -> None:
        log.info("signal request on a channel: cancelling its call")
        self.frames.cancel_by_client()

    def lost(self, exc: Exception | None) -> None:
        self.frames.lost()
        self.writable.set()

    # -- the carrier --

    def writelines(self, parts: list[bytes | memoryview]) -> None:
        self.chan.writelines(parts)  # asyncssh joins them: the one copy before its packets

    def pause_reading(self) -> None:
        self.chan.pause_reading()

    def resume_reading(self) -> None:
        self.chan.resume_reading()

    def close(self) -> None:
        self.chan.close()

    def is_closing(self) -> bool:
        return self.chan.is_closing()


class Channel(asyncssh.SSHServerSession[bytes]):
    """One channel of a connection: becomes the kind its first request asks for."""

    def __init__(self, server: _BrokerServer) -> None:
        self._server = server
        self._chan: asyncssh.SSHServerChannel[bytes] | None = None
        self._kind: _Kind | None = None
        self._term = ""
        self._size: PtySize | None = None  # set by a PTY request

    def connection_made(self, chan: asyncssh.SSHServerChannel[bytes]) -> None:
        self._chan = chan

    def _become(self, kind: _Kind) -> bool:
        self._kind = kind
        return True

    def pty_requested(
        self, term_type: str, term_size: tuple[int, int, int, int], term_modes: object
    ) -> bool:
        """Accept a terminal; it is made when the shell or command starts. (The client's
        terminal modes are not applied: the terminal starts in the kernel's defaults.)"""
        self._term = term_type
        self._size = _pty_size(term_size[0], term_size[1])
        return True

    def terminal_size_changed(self, width: int, height: int, pixwidth: int, pixheight: int) -> None:
        size = _pty_size(width, height)
        if isinstance(self._kind, PtyChannel):
            self._kind.resized(size)
        else:
            self._size = size

    def shell_requested(self) -> bool:
        assert self._chan is not None
        if self._size is None:
            return self._become(RefusedShell(self._server, self._chan))
        return self._become(PtyChannel(self._server, self._chan, None, self._term, self._size))

    def exec_requested(self, command: str) -> bool:
        assert self._chan is not None
        if self._size is not None:
            return self._become(
                PtyChannel(self._server, self._chan, command, self._term, self._size)
            )
        return self._become(CommandChannel(self._server, self._chan, command))

    def subsystem_requested(self, subsystem: str) -> bool:
        assert self._chan is not None
        if subsystem == SUBSYSTEM:
            return self._become(FrameChannel(self._server, self._chan))
        if subsystem == "sftp":
            return self._become(SftpChannel(self._server, self._chan))
        return False

    def session_started(self) -> None:
        if self._kind is not None:
            self._kind.started()

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if self._kind is not None:
            self._kind.data(data, datatype)

    def eof_received(self) -> bool:
        return self._kind.eof() if self._kind is not None else True

    def signal_received(self, signal: str) -> None:
        if isinstance(self._kind, PtyChannel):
            self._kind.signal_named(signal)
        elif self._kind is not None:
            self._kind.signal()

    def pause_writing(self) -> None:
        if self._kind is not None:
            self._kind.pause()

    def resume_writing(self) -> None:
        if self._kind is not None:
            self._kind.resume()

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.sessions -= 1
        if self._kind is not None:
            self._kind.lost(exc)


def _pty_size(width: int, height: int) -> PtySize:
    """A client's terminal size in cells (0, "unknown", becomes the classic 80x24)."""
    return PtySize(min(width, MAX_TERM_CELLS) or 80, min(height, MAX_TERM_CELLS) or 24)
