"""The serve log names what each call worked on, the same way on every transport.

It used to print ``write_file None -> ok`` (an upload's path is in its first message, after the
line's subject was taken) and no line at all for a call over the SSH subsystem.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pytest

from agent_side._remote.ssh import SSHBackend
from broker import Broker
from broker._frontends._service import LOGGED_COMMAND_CHARS
from operations import Backend
from tests.grpc._harness import client, serving
from tests.ssh._harness import serve_over_ssh

pytestmark = pytest.mark.anyio

LONG = "echo " + "x" * 200


async def calls(ops: Backend) -> None:
    async def sink(data: bytes) -> None:
        return None

    await ops.write_file(ops.root + "/up.txt", b"data")
    await ops.exec(LONG, ops.root, on_data=sink)
    await ops.stat(ops.root + "/up.txt")


def lines(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and " -> " in r.getMessage()]


def check(found: list[str], root: Path) -> None:
    up = repr(f"{root}/up.txt")
    shown = repr(LONG[:LOGGED_COMMAND_CHARS] + "...")
    assert any(f" write_file {up} -> ok (" in line for line in found), found
    assert any(f" exec {str(root)!r} $ {shown} -> ok (" in line for line in found), found
    assert any(f" stat {up} -> ok (" in line for line in found), found
    assert not any(" None -> " in line for line in found), found


async def test_grpc_log_lines_name_the_path_and_command(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="opsbroker.grpc")
    async with serving(tmp_path, None) as server, client(server) as ops:
        await calls(ops)
    check(lines(caplog, "opsbroker.grpc"), tmp_path / "ROOT")


async def test_ssh_log_lines_name_the_path_and_command(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="opsbroker.ssh")
    root = tmp_path / "ROOT"
    root.mkdir()
    async with (
        Broker(str(root)) as broker,
        serve_over_ssh(broker, tmp_path / "keys") as setup,
        setup.backend() as ops,
    ):
        assert isinstance(ops, SSHBackend)
        await calls(ops)
    check(lines(caplog, "opsbroker.ssh"), root)


async def test_with_log_commands_off_the_log_shows_the_digest_as_the_audit_does(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("[audit]\nlog_commands = false\n")
    audit = tmp_path / "audit.jsonl"
    caplog.set_level(logging.INFO, logger="opsbroker.grpc")
    async with (
        serving(tmp_path, None, policy=policy, audit_log=audit) as server,
        client(server) as ops,
    ):
        await calls(ops)
    found = [line for line in lines(caplog, "opsbroker.grpc") if " exec " in line]
    digest = "sha256:" + hashlib.sha256(LONG.encode()).hexdigest()
    assert found and all("xxxx" not in line for line in found), found
    assert any(digest[:LOGGED_COMMAND_CHARS] in line for line in found), found
    assert digest in audit.read_text()
