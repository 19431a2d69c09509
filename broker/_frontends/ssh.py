"""The broker as an SSH server (asyncssh): the ``opsbroker`` subsystem, plain commands and SFTP.

One SSH connection carries any number of channels; each channel is one of:

- the ``opsbroker`` subsystem: the protobuf calls of ``service Broker``, framed by
  :mod:`opsbroker.v1.sshframe`, one call at a time per channel (a client opens more channels for more
  concurrent calls, and reuses a channel once its call is over);
- a command (``ssh host 'make test'``): run through the backend's ``exec`` in the root, merged
  output on stdout, the exit status returned;
- a terminal session (``ssh -t host [COMMAND]``; an interactive shell without a command): a
  process started on a PTY through the backend's ``processes``, resized with the client's window;
  ``ssh -T host`` (a shell without a terminal) is refused with a message;
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
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import asyncssh
from opsbroker.sshpackets import lean_packets
from opsbroker.v1.sshframe import (
    DEFAULT_MAX_FRAME_SIZE,
    HEADER_BYTES,
    SUBSYSTEM,
)

from operations import Backend

from ._service import Service, broker_version, capabilities_of
from ._sshchannels import Channel

__all__ = [
    "SUBSYSTEM",
    "AuthorizedKeys",
    "SSHFrontend",
    "SSHServerOptions",
    "load_or_create_host_key",
    "start_ssh_server",
]

log = logging.getLogger("opsbroker.ssh")

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

CHANNEL_MAX_PACKET: Final = 128 * 1024
"""Largest SSH packet we accept on a channel: four times OpenSSH's 32 KiB, so fewer asyncssh
steps per MiB, and no more: a client whose glibc is not tuned for streaming (see
:mod:`opsbroker.malloc`) faults every buffer above 128 KiB in afresh, and at 256 KiB its CPU per
64 MiB written was about twice as high. Peers that announce less are sent packets of their size."""

OUTPUT_EVENT_BYTES: Final = CHANNEL_MAX_PACKET - HEADER_BYTES - 4
"""Command output merged into one ExecEvent, at most: one of our client's SSH packets."""

READ_CHUNK_BYTES: Final = OUTPUT_EVENT_BYTES
"""ReadFile's pieces: framed as a MESSAGE (its ``Chunk`` adds a tag and a 3-byte length), each
fills one SSH packet of our client's exactly. A piece a few bytes longer spills into a nearly
empty packet more (then with asyncssh's MSG_IGNORE before each): 12% more CPU per read."""


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
        version / info: what ``Capabilities`` reports (info: the backend's facts, see
            ``_service.Service``; by default ``backend.capabilities()``).
    """

    def __init__(
        self,
        backend: Backend,
        options: SSHServerOptions,
        *,
        guard: Guard | None = None,
        refused: Refused | None = None,
        version: str | None = None,
        info: Mapping[str, Any] | None = None,
    ) -> None:
        self.backend = backend
        self.options = options
        self.guard = guard
        self.refused = refused
        self.service = Service(
            version=version or broker_version(),
            root=backend.root,
            info=capabilities_of(backend) if info is None else info,
            read_chunk_bytes=READ_CHUNK_BYTES,
            output_event_bytes=OUTPUT_EVENT_BYTES,
        )
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
            allow_pty=True,
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
        self.service.kill_running()
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
    version: str | None = None,
    info: Mapping[str, Any] | None = None,
) -> SSHFrontend:
    """Serve ``backend`` over SSH on ``host:port`` (port 0 picks a free port)."""
    frontend = SSHFrontend(
        backend, options, guard=guard, refused=refused, version=version, info=info
    )
    await frontend.start(host, port)
    return frontend


class _BrokerServer(asyncssh.SSHServer):
    """One per connection: public-key authentication, then a :class:`_Session` per channel."""

    def __init__(self, frontend: SSHFrontend) -> None:
        self.frontend = frontend
        self.principal: str | None = None
        self.conn: asyncssh.SSHServerConnection | None = None
        self.sessions = 0
        self._ops: Backend | None = None
        self._user: str | None = None  # set when authentication begins
        self._authenticated = False
        self._refused_keys: list[str] = []
        self._peer: str | None = None

    @property
    def ops(self) -> Backend:
        """The backend of this connection (behind its policy and audit); built once, after
        authentication."""
        if self._ops is None:
            backend = self.frontend.backend
            if self.frontend.guard is not None:
                assert self.principal is not None
                backend = self.frontend.guard(backend, self.principal, self._peer)
            self._ops = backend
        return self._ops

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn
        lean_packets(conn)  # asyncssh's packets, without its needless copies
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

    def session_requested(self) -> Channel | bool:
        if self.sessions >= MAX_CHANNELS_PER_CONNECTION:
            log.warning("%s: refused a channel beyond %d", self.principal, self.sessions)
            return False
        self.sessions += 1
        return Channel(self)
