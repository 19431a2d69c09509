"""asyncssh's empty MSG_IGNORE before every packet: gone between our ends, kept for CBC.

asyncssh logs every packet it sends at debug level 3 ("Sent MSG_IGNORE (2), ..."): that log is
what these tests read.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest
from opsbroker.sshpackets import NO_IV_CHAINING, skip_empty_ignores

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


class _Open(asyncssh.SSHServer):
    """A bare server that needs no authentication and keeps its ignore packets skipped."""

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        skip_empty_ignores(conn)

    def begin_auth(self, username: str) -> bool:
        return False

    def session_requested(self) -> bool:
        return False


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
    key = asyncssh.generate_private_key("ssh-ed25519")
    server = await asyncssh.create_server(
        _Open, "127.0.0.1", 0, server_host_keys=[key], encryption_algs=[cipher]
    )
    try:
        async with asyncssh.connect(
            "127.0.0.1", server.get_port(), username="u", known_hosts=None,
            encryption_algs=[cipher], client_keys=None, agent_path=None,
        ) as conn:  # fmt: skip
            skip_empty_ignores(conn)
            assert conn.get_extra_info("send_cipher") == cipher
            with packet_log(caplog) as sent, pytest.raises(asyncssh.ChannelOpenError):
                await conn.create_session(
                    asyncssh.SSHClientSession
                )  # refused, once opening was sent
    finally:
        server.close()
        await server.wait_closed()
    assert any("MSG_CHANNEL_OPEN" in line for line in sent), sent
    assert any("MSG_IGNORE" in line for line in sent) is ignored, sent
