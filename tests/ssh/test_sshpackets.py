"""How our ends send and receive SSH packets (``opsbroker.sshpackets.lean_packets``).

asyncssh's empty MSG_IGNORE before every packet is gone between our ends and kept for CBC:
asyncssh logs every packet it sends at debug level 3 ("Sent MSG_IGNORE (2), ..."), and that log
is what the first tests read. AES-GCM packets sealed with one copy are asyncssh's packets byte
for byte, through rekeys. Channel data opened where it lies reaches its channel as asyncssh's
own server sent it, through random cuts of the input and rekeys; a damaged packet, data for an
unknown channel and data handled in a task end or wait as asyncssh has them end or wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import asyncssh
import pytest
from asyncssh.constants import MSG_CHANNEL_DATA, MSG_CHANNEL_EXTENDED_DATA
from asyncssh.packet import SSHPacket, String, UInt32
from opsbroker import sshpackets
from opsbroker.sshpackets import NO_IV_CHAINING, lean_packets

from tests.ssh._harness import broker_over_ssh


@contextlib.contextmanager
def packet_log(caplog: pytest.LogCaptureFixture) -> Iterator[list[str]]:
    """The packets sent while inside, as asyncssh logs them (one line each)."""
    asyncssh.set_debug_level(3)
    sent: list[str] = []
    try:
        with caplog.at_level(logging.DEBUG, logger="asyncssh"):
            caplog.clear()
            yield sent
            sent += [r.getMessage() for r in caplog.records if " Sent " in f" {r.getMessage()}"]
    finally:
        asyncssh.set_debug_level(1)


async def test_no_ignore_packets_between_broker_and_client(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "f").write_bytes(b"x" * 300_000)  # a read of several packets
    async with broker_over_ssh(tmp_path, str(root)) as (setup, client):
        await client.read_file(str(root / "f"))  # connected, channels open
        (conn,) = setup.frontend._connections
        assert conn.get_extra_info("send_cipher") in NO_IV_CHAINING
        with packet_log(caplog) as sent:
            assert (await client.exec("echo hi", str(root), on_data=lambda _: None)).exit_code == 0
            assert await client.read_file(str(root / "f")) == b"x" * 300_000
    assert any("MSG_CHANNEL_DATA" in line for line in sent), sent  # the log is read
    assert not [line for line in sent if "MSG_IGNORE" in line]


class _Echo(asyncssh.SSHServerSession[bytes]):
    """A session that sends back what it receives and exits at its end."""

    def connection_made(self, chan: asyncssh.SSHServerChannel[bytes]) -> None:
        self._chan = chan

    def shell_requested(self) -> bool:
        return True

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        self._chan.write(data)

    def eof_received(self) -> bool:
        self._chan.exit(0)
        return False


class _Open(asyncssh.SSHServer):
    """A bare server that needs no authentication, echoes on its sessions and sends lean."""

    connections: ClassVar[list[asyncssh.SSHServerConnection]] = []
    lean: ClassVar[bool] = True

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.connections.append(conn)
        if self.lean:
            lean_packets(conn)

    def begin_auth(self, username: str) -> bool:
        return False

    def session_requested(self) -> asyncssh.SSHServerSession[bytes]:
        return _Echo()


class _Plain(_Open):
    """:class:`_Open` as asyncssh alone sends and receives."""

    lean = False


class _Collect(asyncssh.SSHClientSession[bytes]):
    def __init__(self) -> None:
        self.received = bytearray()

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        self.received += data


@contextlib.asynccontextmanager
async def _pair(
    cipher: str,
    client: Mapping[str, object] | None = None,
    server: Mapping[str, object] | None = None,
    lean_server: bool = True,
) -> AsyncIterator[asyncssh.SSHClientConnection]:
    """A lean client connected to an :class:`_Open` server (or, if not ``lean_server``, a
    :class:`_Plain` one) with ``cipher`` both ways, each with its further ``asyncssh`` options."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    _Open.connections.clear()
    listener = await asyncssh.create_server(
        _Open if lean_server else _Plain,
        "127.0.0.1",
        0,
        server_host_keys=[key],
        encryption_algs=[cipher],
        encoding=None,
        **(server or {}),
    )
    try:
        async with asyncssh.connect(
            "127.0.0.1", listener.get_port(), username="u", known_hosts=None,
            encryption_algs=[cipher], client_keys=None, agent_path=None, **(client or {}),
        ) as conn:  # fmt: skip
            lean_packets(conn)
            assert conn.get_extra_info("send_cipher") == cipher
            yield conn
    finally:
        listener.close()
        await listener.wait_closed()


async def _echo(conn: asyncssh.SSHClientConnection, data: bytes) -> bytes:
    chan, session = await conn.create_session(_Collect, encoding=None)
    for i in range(0, len(data), 100_000):
        chan.write(data[i : i + 100_000])
    chan.write_eof()
    await chan.wait_closed()
    return bytes(session.received)


@pytest.mark.parametrize(
    ("cipher", "ignored"),
    [
        ("aes128-gcm@openssh.com", False),
        ("chacha20-poly1305@openssh.com", False),
        ("aes256-ctr", False),
        ("aes128-cbc", True),
    ],
)
async def test_only_cbc_connections_keep_their_ignore_packets(
    cipher: str, ignored: bool, caplog: pytest.LogCaptureFixture
) -> None:
    async with _pair(cipher) as conn:
        with packet_log(caplog) as sent:
            assert await _echo(conn, b"ping") == b"ping"
    assert any("MSG_CHANNEL_OPEN" in line for line in sent), sent
    assert any("MSG_IGNORE" in line for line in sent) is ignored, sent


class _Capture:
    """A transport that keeps what is written to it, and how."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes]] = []

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default

    def write(self, data: bytes) -> None:
        self.calls.append(("write", bytes(data)))

    def writelines(self, parts: list[bytes]) -> None:
        self.calls.append(("writelines", b"".join(parts)))


@pytest.mark.parametrize("cipher", ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com"])
async def test_sealed_packets_are_the_packets_asyncssh_sends(
    cipher: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each packet is sent twice from the same state, by asyncssh's own ``send_packet`` and
    through ``lean_packets``, into a capturing transport: the bytes and the state after must be the
    same. Payload sizes cover every padding length; the padding's random bytes are fixed."""
    lean: Any = None
    async with _pair(cipher) as conn:
        lean = conn
        real = lean._transport
        cipher_state = lean._send_encryption._cipher

        def state() -> tuple[bytes, int, int]:
            return cipher_state._iv, lean._send_seq, lean._rekey_bytes_sent

        cases: list[tuple[int, tuple[bytes, ...]]] = [
            (MSG_CHANNEL_DATA, (UInt32(0) + String(b"d" * n),)) for n in range(40)
        ]
        cases += [
            (MSG_CHANNEL_DATA, (UInt32(0) + String(os.urandom(128 * 1024 - 13)),)),
            (MSG_CHANNEL_EXTENDED_DATA, (UInt32(0), UInt32(1), String(b"err" * 999))),
        ]
        monkeypatch.setattr(os, "urandom", lambda n: bytes(range(101, 101 + n)))
        try:
            for pkttype, args in cases:
                before = state()
                lean._transport = theirs = _Capture()
                type(conn).send_packet(conn, pkttype, *args)
                after = state()
                cipher_state._iv, lean._send_seq, lean._rekey_bytes_sent = before
                lean._transport = ours = _Capture()
                conn.send_packet(pkttype, *args)
                assert state() == after != before
                assert [how for how, _ in theirs.calls] == ["write"]  # the ignore packet held back
                assert [how for how, _ in ours.calls] == ["writelines"]  # the sealed path taken
                assert ours.calls[0][1] == theirs.calls[0][1], (pkttype, len(args[-1]))
                cipher_state._iv, lean._send_seq, lean._rekey_bytes_sent = before  # unsent
        finally:
            lean._transport = real
            monkeypatch.undo()
        assert await _echo(conn, b"still in step") == b"still in step"


@pytest.mark.parametrize("cipher", ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com"])
@pytest.mark.parametrize("side", ["client", "server"])
async def test_sealed_packets_rekey_when_due(
    cipher: str, side: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One end rekeys after every 256 KiB it sends: asyncssh's own path starts each key exchange
    when one is due (and holds channel data back meanwhile). 3 MiB go through the echo intact,
    under new keys that end asked for."""
    data = os.urandom(3 * 1024 * 1024)
    with caplog.at_level(logging.DEBUG, logger="asyncssh"):
        async with _pair(cipher, **{side: {"rekey_bytes": 256 * 1024}}) as conn:
            caplog.clear()
            assert await _echo(conn, data) == data
    asked = [r for r in caplog.records if r.getMessage().endswith("Requesting key exchange")]
    assert len(asked) >= 8, len(asked)


async def test_a_packet_log_takes_asyncssh_path(caplog: pytest.LogCaptureFixture) -> None:
    """At debug level 3 asyncssh logs each packet it sends: then every packet is its own."""
    async with _pair("aes128-gcm@openssh.com") as conn:
        with packet_log(caplog) as sent:
            assert await _echo(conn, b"logged") == b"logged"
    assert any("MSG_CHANNEL_DATA" in line for line in sent), sent


def _ragged(conn: asyncssh.SSHClientConnection, seed: int, damage_at: int | None = None) -> None:
    """Hand what ``conn`` receives from now on to it in pieces of random sizes (single bytes,
    sizes around a length field and a block, and up to 70 KB), flipping one bit of the byte
    ``damage_at`` bytes on, if given."""
    lean: Any = conn
    inner = lean.data_received
    rng = random.Random(seed)
    seen = 0

    def data_received(data: bytes, datatype: object = None) -> None:
        nonlocal seen
        piece = bytearray(data)
        if damage_at is not None and seen <= damage_at < seen + len(piece):
            piece[damage_at - seen] ^= 0x10
        seen += len(piece)
        at = 0
        while at < len(piece):
            size = rng.choice((1, 3, 4, 5, 15, 16, 17, rng.randrange(1, 70_000)))
            inner(bytes(piece[at : at + size]))
            at += size

    lean.data_received = data_received
    lean._transport.set_protocol(lean)  # uvloop's transports keep the protocol's data_received


class _Counted(SSHPacket):
    """asyncssh's packet decoder, counting the packets opened by ``lean_packets``."""

    made = 0

    def __init__(self, packet: bytes) -> None:
        super().__init__(packet)
        _Counted.made += 1


@pytest.mark.parametrize("cipher", ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com"])
@pytest.mark.parametrize("rekey", [False, True])
async def test_opened_packets_deliver_what_asyncssh_sent(
    cipher: str, rekey: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lean client takes 4 MiB from asyncssh's own server, its input cut at random (packets
    split anywhere, several in one piece), while the server asks for new keys every 256 KiB or
    not at all: the echo comes back intact, and the client opened the channel data itself."""
    monkeypatch.setattr(sshpackets, "SSHPacket", _Counted)
    _Counted.made = 0
    data = os.urandom(4 * 1024 * 1024)
    options = {"rekey_bytes": 256 * 1024} if rekey else {}
    async with _pair(cipher, server=options, lean_server=False) as conn:
        _ragged(conn, seed=len(cipher) + rekey)
        assert await _echo(conn, data) == data
    assert _Counted.made >= len(data) // 32768  # asyncssh's packets carry 32 KiB at most


class _Client(asyncssh.SSHClient):
    lost: BaseException | None = None

    def connection_lost(self, exc: Exception | None) -> None:
        _Client.lost = exc


async def test_a_damaged_packet_ends_the_connection_as_asyncssh_does() -> None:
    """One bit flipped in the channel data a lean client receives: the tag fails, asyncssh
    disconnects with a MAC error, and nothing of the damaged packet or after it is delivered."""
    data = os.urandom(2 * 1024 * 1024)
    _Client.lost = None
    async with _pair(
        "aes128-gcm@openssh.com", client={"client_factory": _Client}, lean_server=False
    ) as conn:
        _ragged(conn, seed=7, damage_at=700_000)
        received = await _echo(conn, data)
        await asyncio.wait_for(conn.wait_closed(), 10)
    assert isinstance(_Client.lost, asyncssh.MACError), _Client.lost
    assert len(received) < 700_000 and data.startswith(received)


async def test_data_for_an_unknown_channel_is_left_to_asyncssh() -> None:
    """A packet of channel data for a channel the client never opened: asyncssh's own check
    refuses it and ends the connection, as it would without ``lean_packets``."""
    _Client.lost = None
    async with _pair("aes128-gcm@openssh.com", client={"client_factory": _Client}) as conn:
        assert await _echo(conn, b"first") == b"first"
        (server,) = _Open.connections
        server.send_packet(MSG_CHANNEL_DATA, UInt32(4242), String(b"stray"))
        await asyncio.wait_for(conn.wait_closed(), 10)
    assert isinstance(_Client.lost, asyncssh.ProtocolError), _Client.lost
    assert "Invalid channel number" in str(_Client.lost)


async def test_channel_data_handled_in_a_task_holds_the_input_behind_it() -> None:
    """A channel whose handling of data goes on in a task (asyncssh's ``process_packet`` may
    return an awaitable): the input behind it waits until the task is done, then every byte
    arrives, in order."""
    data = os.urandom(1024 * 1024)
    async with _pair("aes128-gcm@openssh.com", lean_server=False) as conn:
        chan, session = await conn.create_session(_Collect, encoding=None)
        lean: Any = chan
        handle = lean.process_packet
        later = 0

        async def in_a_task(pkttype: int, seq: int, packet: SSHPacket) -> None:
            nonlocal later
            later += 1
            await asyncio.sleep(0.001)
            handle(pkttype, seq, packet)

        def process_packet(pkttype: int, seq: int, packet: SSHPacket) -> object:
            if pkttype == MSG_CHANNEL_DATA:
                return in_a_task(pkttype, seq, packet)
            return handle(pkttype, seq, packet)

        lean.process_packet = process_packet
        for i in range(0, len(data), 100_000):
            chan.write(data[i : i + 100_000])
        chan.write_eof()
        await chan.wait_closed()
    assert bytes(session.received) == data
    assert later >= len(data) // 32768
