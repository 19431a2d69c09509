"""What ``connect("ssh://...", **options)`` and ``SSHBackend(**options)`` accept: a bad option is
an ``InvalidArgument`` naming it, when the backend is made or at the latest when it connects,
never a ``TypeError`` from asyncssh; asyncssh's own options still reach the connection."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from agent_side import connect
from broker import Broker
from operations import InvalidArgument

from ._harness import serve_over_ssh

pytestmark = pytest.mark.anyio

URL = "ssh://agent@127.0.0.1:1"  # nothing listens: these fail before any connection is tried


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bogus": 1}, "unknown option(s) bogus"),
        ({"token": "t", "ca_file": "x"}, "unknown option(s) ca_file, token"),
        ({"password": "x"}, "password: set by the SSH backend itself"),
        ({"agent_path": "/a", "kbdint_auth": True}, "agent_path, kbdint_auth: set by"),
        ({"tune_allocator": "yes"}, "tune_allocator must be True or False, not 'yes'"),
        ({"max_frame_size": "9"}, "max_frame_size must be a positive int, not '9'"),
        ({"max_frame_size": 0}, "max_frame_size must be a positive int, not 0"),
    ],
)
def test_a_bad_option_is_refused_when_the_backend_is_made(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        connect(URL, **options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"client_keys": ["/nonexistent-opsbroker/key"]}, "No such file or directory"),
        ({"connect_timeout": "soon"}, "cannot use the SSH options"),
    ],
)
async def test_a_bad_option_value_is_refused_when_connecting(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message) as caught:
        async with connect(URL, **options):
            pass
    assert caught.value.op == "connect"


async def test_asyncssh_options_reach_the_connection(tmp_path: Path) -> None:
    async with Broker(str(tmp_path)) as broker, serve_over_ssh(broker, tmp_path / "keys") as setup:
        backend = setup.backend(keepalive_interval=7, client_version="opsbroker-test")
        async with backend:
            assert await backend.exists(backend.root) is True
            conn = backend._conn
            assert conn is not None
            assert conn.get_extra_info("client_version") == "SSH-2.0-opsbroker-test"
            assert conn._keepalive_interval == 7
