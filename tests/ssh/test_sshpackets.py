"""How our ends send SSH packets (``opsbroker.sshpackets.send_lean``).

asyncssh's empty MSG_IGNORE before every packet is gone between our ends and kept for CBC:
asyncssh logs every packet it sends at debug level 3 ("Sent MSG_IGNORE (2), ..."), and that log
is what the first tests read. AES-GCM packets sealed with one copy are asyncssh's packets byte
for byte, through rekeys, and asyncssh's own path still sends what it must.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import asyncssh
import pytest
from asyncssh.constants import MSG_CHANNEL_DATA, MSG_CHANNEL_EXTENDED_DATA
from asyncssh.packet import String, UInt32
from opsbroker.sshpackets import NO_IV_CHAINING, send_lean

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

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        send_lean(conn)

    def begin_auth(self, username: str) -> bool:
        return False

    def session_requested(self) -> asyncssh.SSHServerSession[bytes]:
        return _Echo()


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
) -> AsyncIterator[asyncssh.SSHClientConnection]:
    """A lean client connected to a lean :class:`_Open` server with ``cipher`` both ways, each
    with its further ``asyncssh`` options."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    listener = await asyncssh.create_server(
        _Open,
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
            send_lean(conn)
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
    through ``send_lean``, into a capturing transport: the bytes and the state after must be the
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
