"""The broker as an SSH server (asyncssh): the ``opsbroker`` subsystem, plain commands and SFTP.

One SSH connection carries any number of channels; each channel is one of:

- the ``opsbroker`` subsystem: the protobuf calls of ``service Broker``, framed by
  :mod:`opsbroker.v1.sshframe`, one call at a time per channel (a client opens more channels for more
  concurrent calls, and reuses a channel once its call is over);
- a command (``ssh host 'make test'``): run through the backend's ``exec`` in the root, merged
  output on stdout, the exit status returned; ``ssh host`` alone is refused with a message;
- the ``sftp`` subsystem, backed by the backend's confined file operations (:mod:`._sftp`).

Authentication is by public key only, against an ``authorized_keys`` file; the principal of a
connection is the key's comment, or its SHA256 fingerprint when the comment is empty.

**Cancellation:** closing a channel, an SSH ``signal`` request on it, a ``CANCEL`` frame, or the
loss of the connection cancels the channel's running call; the backend then kills the command
tree before the call ends.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final, Self, cast

import asyncssh
from asyncssh.stream import SSHServerStreamSession
from google.protobuf.message import Message as ProtoMessage
from opsbroker.v1.codec import error_to_wire
from opsbroker.v1.sshframe import (
    DEFAULT_MAX_FRAME_SIZE,
    HEADER_BYTES,
    NEED_DATA,
    Cancel,
    End,
    EndOfInput,
    FrameConnection,
    Message,
    ProtocolError,
    Request,
    Role,
    State,
)

from operations import Aborted, Backend, InvalidArgument, KillReason, OpsError, TooLarge

from ._service import METHODS, Service
from ._sftp import BackendSFTPServer

__all__ = [
    "SUBSYSTEM",
    "AuthorizedKeys",
    "SSHFrontend",
    "SSHServerOptions",
    "load_or_create_host_key",
    "start_ssh_server",
]

log = logging.getLogger("opsbroker.ssh")

SUBSYSTEM: Final = "opsbroker"
"""The SSH subsystem name that carries the framed protobuf calls."""

LOGIN_TIMEOUT_S: Final = 30.0
"""A connection that has not authenticated by then is dropped (OpenSSH's LoginGraceTime is 120)."""

KEEPALIVE_INTERVAL_S: Final = 15.0
"""Keepalive probe period: a client that vanished without a FIN is noticed and its calls killed."""

MAX_CHANNELS_PER_CONNECTION: Final = 1024
"""Open channels one connection may hold: far above a client's concurrency, a bound on its cost."""

SHUTDOWN_GRACE_S: Final = 5.0
"""How long a stopping front-end lets killed commands report ``SHUTDOWN`` before it hangs up."""

KEEPALIVE_COUNT_MAX: Final = 3
"""Unanswered keepalives before the connection is dropped (about 45 s with the interval above)."""

CHANNEL_WINDOW: Final = 8 * 1024 * 1024
"""Bytes a client may send on a channel before we acknowledge: room for a fast stream."""

CHANNEL_MAX_PACKET: Final = 256 * 1024
"""Largest SSH packet we accept on a channel: fewer packets (and fewer asyncssh steps) per MiB.
Peers that announce less (OpenSSH: 32 KiB) are sent packets of their size."""

READ_CHUNK_BYTES: Final = CHANNEL_MAX_PACKET - HEADER_BYTES - 4
"""ReadFile's pieces: framed as a MESSAGE (its ``Chunk`` adds a tag and a 3-byte length), each
fills one 256 KiB SSH packet of our client's exactly. A piece of ``CHUNK_BYTES`` would spill 9
bytes into a second packet (with asyncssh's MSG_IGNORE before each): 12% more CPU per read."""

INBOUND_HIGH_WATER: Final = 64
"""Buffered client messages (64 KiB chunks) at which a channel stops reading: backpressure."""

COALESCE_BYTES: Final = 256 * 1024
"""Queued reply bytes that are written at once instead of at the end of the loop iteration."""

INBOUND_LOW_WATER: Final = 16
"""Buffered client messages at which a paused channel reads again."""

NO_SHELL_MESSAGE: Final = (
    "opsbroker: interactive shells are not offered. Run a command instead "
    "(ssh HOST 'COMMAND'), or use sftp or the opsbroker subsystem.\r\n"
)

SFTP_VERSION: Final = 3
"""The SFTP protocol version offered: v3 is what OpenSSH speaks (later versions add nothing
this server would serve)."""

EXIT_TIMEOUT: Final = 124
"""Exit status of a command killed for its timeout (as coreutils ``timeout`` reports it)."""

EXIT_KILLED: Final = 137
"""Exit status of a command killed for any other reason (128 + SIGKILL)."""


def _snake(method: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", method).lower()


# --- keys ---------------------------------------------------------------------------------------


def load_or_create_host_key(path: str | os.PathLike[str]) -> asyncssh.SSHKey:
    """Load the host key at ``path``, or generate an Ed25519 key there (mode 0600) if absent."""
    path = Path(path)
    try:
        return asyncssh.read_private_key(path)
    except FileNotFoundError:
        pass
    key = asyncssh.generate_private_key("ssh-ed25519", comment="opsbroker host key")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(key.export_private_key())
    key.write_public_key(str(path) + ".pub")
    log.info("generated host key %s (%s)", path, key.get_fingerprint())
    return key


class AuthorizedKeys:
    """The public keys allowed in, read from an OpenSSH ``authorized_keys`` file.

    The file is re-read when it changes, so removing a line revokes a key for new connections.
    Lines with options (``from=``, ``command=``, ...) are skipped with a warning: an option this
    server would not enforce must not silently widen access.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self._principals: dict[bytes, str] = {}
        self.reload()

    def reload(self) -> None:
        """Re-read the file if it changed since the last read."""
        st = self.path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        principals: dict[bytes, str] = {}
        for number, line in enumerate(self.path.read_text().splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                key = asyncssh.import_public_key(line)
            except (asyncssh.KeyImportError, ValueError):
                log.warning("%s:%d: skipped (options or unknown key type)", self.path, number)
                continue
            comment = key.get_comment() or key.get_fingerprint()
            principals[key.public_data] = comment
        self._principals = principals
        self._stamp = stamp

    def principal(self, key: asyncssh.SSHKey) -> str | None:
        """The principal of ``key``, or ``None`` when it is not authorized."""
        return self._principals.get(key.public_data)


# --- the server ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SSHServerOptions:
    """How the SSH front-end runs.

    Args:
        authorized_keys: the ``authorized_keys`` file of the keys allowed in.
        host_key: the host key file; generated (mode 0600) on first start if absent.
        login_timeout: seconds a client has to authenticate.
        keepalive_interval: seconds between keepalive probes (0 disables them).
        command_timeout: the timeout of plain ``ssh host 'command'`` commands, in seconds;
            ``None`` leaves the backend's default (the policy's) in force.
        max_frame_size: the largest frame of the ``opsbroker`` subsystem.
    """

    authorized_keys: str | os.PathLike[str]
    host_key: str | os.PathLike[str]
    login_timeout: float = LOGIN_TIMEOUT_S
    keepalive_interval: float = KEEPALIVE_INTERVAL_S
    command_timeout: float | None = None
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE


Guard = Callable[[Backend, str, "str | None"], Backend]
"""Builds the backend one connection uses from the core, its principal and its peer address
(e.g. policy and audit around the core, with ``transport="ssh"``)."""

Refused = Callable[[str, "str | None"], None]
"""Told of a connection that tried to authenticate and never did: the reason (the user name and
the fingerprints of the keys offered, never a secret) and the peer address (for the audit log)."""

MAX_KEYS_NOTED = 8
"""Fingerprints of refused keys kept per connection for the refusal record."""


class SSHFrontend:
    """A running SSH front-end. ``port`` is the bound port; close with :meth:`aclose`.

    Args:
        backend: what every connection works on.
        options: keys, timeouts and limits.
        guard: if given, each authenticated connection works on ``guard(backend, principal,
            peer)`` instead (where policy and audit attach); by default on ``backend`` itself.
        refused: if given, called once for each connection that attempted authentication and
            closed without succeeding.
    """

    def __init__(
        self,
        backend: Backend,
        options: SSHServerOptions,
        *,
        guard: Guard | None = None,
        refused: Refused | None = None,
    ) -> None:
        self.backend = backend
        self.options = options
        self.guard = guard
        self.refused = refused
        self.authorized_keys = AuthorizedKeys(options.authorized_keys)
        self.host_key = load_or_create_host_key(options.host_key)
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._connections: set[asyncssh.SSHServerConnection] = set()
        self._servers: set[_BrokerServer] = set()
        self._calls: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> None:
        self._acceptor = await asyncssh.create_server(
            lambda: _BrokerServer(self),
            host,
            port,
            server_host_keys=[self.host_key],
            login_timeout=self.options.login_timeout,
            keepalive_interval=self.options.keepalive_interval,
            keepalive_count_max=KEEPALIVE_COUNT_MAX,
            encoding=None,
            window=CHANNEL_WINDOW,
            max_pktsize=CHANNEL_MAX_PACKET,
            allow_pty=False,
            x11_forwarding=False,
            agent_forwarding=False,
            line_editor=False,
        )

    @property
    def port(self) -> int:
        assert self._acceptor is not None, "the front-end is not started"
        return int(self._acceptor.get_port())

    async def aclose(self, grace: float = SHUTDOWN_GRACE_S) -> None:
        """Stop: refuse new connections, kill running commands (their callers see
        ``SHUTDOWN``), let the calls end for up to ``grace`` seconds, then drop every connection
        (which cancels whatever still runs). Idempotent."""
        if self._acceptor is not None:
            self._acceptor.close()
            await self._acceptor.wait_closed()
            self._acceptor = None
        for server in list(self._servers):
            if server._service is not None:
                server._service.kill_running()
        if self._calls:
            await asyncio.wait(list(self._calls), timeout=grace)
        for conn in list(self._connections):
            conn.close()
        for conn in list(self._connections):
            await conn.wait_closed()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def start_ssh_server(
    backend: Backend,
    options: SSHServerOptions,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    guard: Guard | None = None,
    refused: Refused | None = None,
) -> SSHFrontend:
    """Serve ``backend`` over SSH on ``host:port`` (port 0 picks a free port)."""
    frontend = SSHFrontend(backend, options, guard=guard, refused=refused)
    await frontend.start(host, port)
    return frontend


class _BrokerServer(asyncssh.SSHServer):
    """One per connection: public-key authentication, then a :class:`_Session` per channel."""

    def __init__(self, frontend: SSHFrontend) -> None:
        self.frontend = frontend
        self.principal: str | None = None
        self.conn: asyncssh.SSHServerConnection | None = None
        self.sessions = 0
        self._service: Service | None = None
        self._user: str | None = None  # set when authentication begins
        self._authenticated = False
        self._refused_keys: list[str] = []
        self._peer: str | None = None

    @property
    def service(self) -> Service:
        """The calls of this connection, on its (guarded) backend; built once, after auth."""
        if self._service is None:
            backend = self.frontend.backend
            if self.frontend.guard is not None:
                assert self.principal is not None
                backend = self.frontend.guard(backend, self.principal, self._peer)
            self._service = Service(backend, read_chunk_bytes=READ_CHUNK_BYTES)
        return self._service

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn
        peer = conn.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if peer else None
        self.frontend._connections.add(conn)
        self.frontend._servers.add(self)
        sock = conn.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # Without it, small request/response exchanges stall on delayed ACKs.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.frontend._servers.discard(self)
        if self.conn is not None:
            self.frontend._connections.discard(self.conn)
        if self._user is not None and not self._authenticated and self.frontend.refused:
            keys = ", ".join(self._refused_keys) or "none"
            self.frontend.refused(
                f"SSH user {self._user[:64]!r}: no authorized key (keys offered: {keys})",
                self._peer,
            )

    def begin_auth(self, username: str) -> bool:
        self._user = username
        self.frontend.authorized_keys.reload()
        return True

    def auth_completed(self) -> None:
        self._authenticated = True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        principal = self.frontend.authorized_keys.principal(key)
        if principal is None:
            fingerprint = key.get_fingerprint()
            if len(self._refused_keys) < MAX_KEYS_NOTED and fingerprint not in self._refused_keys:
                self._refused_keys.append(fingerprint)
            return False
        self.principal = principal
        return True

    def session_requested(self) -> _Session | bool:
        if self.sessions >= MAX_CHANNELS_PER_CONNECTION:
            log.warning("%s: refused a channel beyond %d", self.principal, self.sessions)
            return False
        self.sessions += 1
        return _Session(self)


class _Session(asyncssh.SSHServerSession[bytes]):
    """One channel: becomes a frame session, a command, a refused shell, or an SFTP session."""

    def __init__(self, server: _BrokerServer) -> None:
        self._server = server
        self._frontend = server.frontend
        self._chan: asyncssh.SSHServerChannel[bytes] | None = None
        self._mode: str | None = None
        self._command = ""
        self._sftp: SSHServerStreamSession[bytes] | None = None
        self._task: asyncio.Task[None] | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._frames = FrameConnection(
            Role.SERVER, max_frame_size=self._frontend.options.max_frame_size
        )
        self._inbound: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._read_paused = False
        self._cancel_requested = False
        self._pending: list[bytes] = []
        self._pending_bytes = 0

    # -- channel hooks --

    def connection_made(self, chan: asyncssh.SSHServerChannel[bytes]) -> None:
        self._chan = chan

    def pty_requested(self, term_type: str, term_size: object, term_modes: object) -> bool:
        return False

    def shell_requested(self) -> bool:
        self._mode = "shell"
        return True

    def exec_requested(self, command: str) -> bool:
        self._mode = "exec"
        self._command = command
        return True

    def subsystem_requested(self, subsystem: str) -> bool:
        if subsystem == SUBSYSTEM:
            self._mode = "frames"
            return True
        if subsystem == "sftp":
            assert self._chan is not None
            self._mode = "sftp"
            backend = self._server.service.backend
            self._sftp = SSHServerStreamSession(
                None,
                lambda chan: BackendSFTPServer(
                    cast("asyncssh.SSHServerChannel[bytes]", chan),
                    backend,
                    drain=self._writable.wait,
                ),
                SFTP_VERSION,
            )
            self._sftp.connection_made(self._chan)
            return True
        return False

    def session_started(self) -> None:
        if self._sftp is not None:
            self._sftp.session_started()
        elif self._mode == "exec":
            self._start(self._run_command(self._command))
        elif self._mode == "shell":
            assert self._chan is not None
            self._chan.write_stderr(NO_SHELL_MESSAGE.encode())
            self._chan.exit(1)

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if self._sftp is not None:
            self._sftp.data_received(data, datatype)
        elif self._mode == "frames":
            self._frames.receive_data(data)
            self._pump()
        # A command's stdin is /dev/null: input on a command channel is dropped.

    def eof_received(self) -> bool:
        if self._sftp is not None:
            return bool(self._sftp.eof_received())
        if self._mode == "frames":
            self._frames.receive_data(b"")
            self._pump()
        return True

    def signal_received(self, signal: str) -> None:
        log.info("signal %s on a channel: cancelling its call", signal)
        self._cancel_requested = True
        self._cancel_soon()

    def pause_writing(self) -> None:
        self._writable.clear()
        if self._sftp is not None:
            self._sftp.pause_writing()

    def resume_writing(self) -> None:
        self._writable.set()
        if self._sftp is not None:
            self._sftp.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.sessions -= 1
        if self._sftp is not None:
            self._sftp.connection_lost(exc)
        self._cancel_requested = False
        self._cancel()
        self._writable.set()

    # -- tasks --

    def _start(self, coro: Coroutine[object, object, None]) -> None:
        assert self._task is None
        self._task = task = asyncio.ensure_future(coro)
        calls = self._frontend._calls
        calls.add(task)
        task.add_done_callback(calls.discard)

    def _cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def _cancel_soon(self) -> None:
        """Cancel the running call once it has started (so that it can still answer END)."""
        asyncio.get_running_loop().call_soon(self._cancel)

    async def _drain(self) -> None:
        await self._writable.wait()
        if self._chan is None or self._chan.is_closing():
            raise BrokenPipeError("channel closed")

    # -- plain commands --

    async def _run_command(self, command: str) -> None:
        chan = self._chan
        assert chan is not None
        backend = self._server.service.backend

        async def on_data(data: bytes) -> None:
            chan.write(data)
            await self._drain()

        try:
            result = await backend.exec(
                command,
                backend.root,
                on_data=on_data,
                timeout=self._frontend.options.command_timeout,
            )
        except OpsError as exc:
            chan.write_stderr(f"opsbroker: {exc}\r\n".encode())
            chan.exit(1)
            return
        except asyncio.CancelledError:
            if self._cancel_requested and not chan.is_closing():
                chan.write_stderr(b"opsbroker: command killed by a signal request\r\n")
                chan.exit(EXIT_KILLED)
            raise
        finally:
            self._task = None
        if result.exit_code is not None:
            status = result.exit_code if result.exit_code >= 0 else 128 - result.exit_code
            chan.exit(status & 0xFF)
            return
        reason = result.kill_reason.value if result.kill_reason else "unknown"
        chan.write_stderr(f"opsbroker: command killed ({reason})\r\n".encode())
        chan.exit(EXIT_TIMEOUT if result.kill_reason is KillReason.TIMEOUT else EXIT_KILLED)

    # -- the opsbroker subsystem --

    def _pump(self) -> None:
        """Handle every complete frame received so far."""
        frames = self._frames
        while True:
            try:
                event = frames.next_event()
            except ProtocolError as exc:
                log.warning("opsbroker subsystem: %s; closing the channel", exc)
                self._cancel()
                if self._chan is not None:
                    self._chan.close()
                return
            if event is NEED_DATA:
                if frames.closed_by_peer and self._task is None and self._chan is not None:
                    self._chan.close()
                return
            if isinstance(event, Request):
                self._cancel_requested = False
                self._inbound = asyncio.Queue()
                self._start(self._run_call(event.method, event.message, self._inbound))
            elif isinstance(event, Message):
                self._inbound.put_nowait(event.message)
                if self._inbound.qsize() >= INBOUND_HIGH_WATER and self._chan is not None:
                    self._read_paused = True
                    self._chan.pause_reading()
            elif isinstance(event, EndOfInput):
                self._inbound.put_nowait(None)
            elif isinstance(event, Cancel):
                self._cancel_requested = True
                self._cancel_soon()
            self._maybe_next_call()

    def _maybe_next_call(self) -> None:
        if self._frames.our_state is State.DONE and self._frames.their_state is State.DONE:
            self._frames.start_next_call()

    async def _receive(self, inbound: asyncio.Queue[bytes | None]) -> bytes | None:
        item = await inbound.get()
        if self._read_paused and inbound.qsize() <= INBOUND_LOW_WATER and self._chan is not None:
            self._read_paused = False
            self._chan.resume_reading()
        return item

    def _write(self, data: bytes) -> None:
        """Queue frame bytes; they leave together at the end of this loop iteration (a reply and
        its END share one SSH packet), or at once when :data:`COALESCE_BYTES` are waiting."""
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._flush)
        self._pending.append(data)
        self._pending_bytes += len(data)
        if self._pending_bytes >= COALESCE_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._pending and self._chan is not None and not self._chan.is_closing():
            self._chan.write(b"".join(self._pending))
        self._pending.clear()
        self._pending_bytes = 0

    async def _send(self, message: ProtoMessage) -> None:
        payload = message.SerializeToString()
        if len(payload) >= self._frames.max_frame_size:
            raise TooLarge(
                "reply", None, f"a {len(payload)}-byte message exceeds the SSH frame limit"
            )
        self._write(self._frames.send(Message(payload)))
        await self._drain()

    async def _run_call(
        self, method: str, first: bytes, inbound: asyncio.Queue[bytes | None]
    ) -> None:
        op = _snake(method)
        error: OpsError | None = None
        call = _FrameCall(self._send, lambda: self._receive(inbound))
        try:
            handler = METHODS.get(method)
            if handler is None:
                raise InvalidArgument(op, None, f"unknown method {method!r}")
            await handler(self._server.service, first, call)
        except OpsError as exc:
            error = exc
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not self._cancel_requested or task is None or self._chan is None:
                raise
            task.uncancel()
            error = Aborted(op, None, "cancelled by the client")
        except (BrokenPipeError, ConnectionError):
            return
        except Exception:
            log.exception("opsbroker subsystem: %s failed", method)
            error = OpsError(op, None, "internal broker error (see the broker's log)")
        finally:
            self._task = None
        if self._chan is None or self._chan.is_closing():
            return
        detail = b"" if error is None else error_to_wire(error).SerializeToString()
        self._write(self._frames.send(End(detail)))
        self._maybe_next_call()
        if self._frames.closed_by_peer:
            self._flush()
            self._chan.close()


@dataclass
class _FrameCall:
    """The :class:`~._service.Call` of one framed call."""

    _send: Callable[[ProtoMessage], Awaitable[None]]
    _receive: Callable[[], Awaitable[bytes | None]]

    async def send(self, message: ProtoMessage) -> None:
        await self._send(message)

    async def receive(self) -> bytes | None:
        return await self._receive()
