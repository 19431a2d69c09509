"""A stock OpenSSH client (``ssh``, ``sftp``) against the broker's SSH front-end on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import stat
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from broker import Broker
from tests.conformance._workspace import DiskWorkspace, tree_digest
from tests.ssh._harness import (
    SSHSetup,
    client_setup,
    exists_in,
    make_keys,
    read_in,
    serve_over_ssh,
    write_in,
)
from tests.ssh._procs import marker, pids_with, wait_for

SSH = shutil.which("ssh") or "/usr/bin/ssh"
SFTP = shutil.which("sftp") or "/usr/bin/sftp"


def _options(setup: SSHSetup, key: Path | None = None) -> list[str]:
    return [
        "-F",
        "/dev/null",
        "-i",
        str(key or setup.client_key),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        f"UserKnownHostsFile={setup.known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "LogLevel=ERROR",
    ]


async def _run(*argv: str, timeout: float = 20) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def ssh(
    setup: SSHSetup, *command: str, key: Path | None = None, options: Sequence[str] = ()
) -> tuple[int, str, str]:
    return await _run(
        SSH, "-T", *_options(setup, key), *options, "-p", str(setup.port), "agent@127.0.0.1",
        *command,
    )  # fmt: skip


async def sftp(
    setup: SSHSetup, tmp_path: Path, script: str, options: Sequence[str] = ()
) -> tuple[int, str, str]:
    batch = tmp_path / "batch"
    batch.write_text(script)
    return await _run(
        SFTP, *_options(setup), *options, "-P", str(setup.port), "-b", str(batch),
        "agent@127.0.0.1",
    )  # fmt: skip


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[str, str]:
    root, outside = DiskWorkspace.create_dirs(tmp_path)
    os.symlink(outside, os.path.join(root, "out"))
    os.symlink("/etc", os.path.join(root, "etc"))
    return root, outside


@pytest.fixture
async def setup(tmp_path: Path, dirs: tuple[str, str]) -> AsyncIterator[SSHSetup]:
    async with Broker(dirs[0]) as broker, serve_over_ssh(broker, tmp_path / "keys") as running:
        yield running


async def test_commands_and_exit_codes(setup: SSHSetup) -> None:
    assert await ssh(setup, "echo hi") == (0, "hi\n", "")
    code, _, _ = await ssh(setup, "exit 42")
    assert code == 42
    code, out, _ = await ssh(setup, "echo out; echo err >&2; false")
    assert (code, out) == (1, "out\nerr\n")


async def test_input_to_a_plain_command_is_refused_aloud(setup: SSHSetup) -> None:
    """A plain command reads /dev/null; input piped to ``ssh`` is not delivered, and stderr
    says so once (the command itself runs and reports as usual)."""
    argv = [SSH, "-T", *_options(setup), "-p", str(setup.port), "agent@127.0.0.1"]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        "sleep 1; wc -c",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(b"x" * 100_000), 20)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert (proc.returncode, out.split()) == (0, [b"0"])  # wc saw nothing: stdin is /dev/null
    assert err.count(b"input to this command is not delivered") == 1, err


async def test_no_command_is_refused_with_a_message(setup: SSHSetup) -> None:
    code, _, err = await ssh(setup)
    assert code == 1
    assert "interactive shells are not offered" in err


async def test_unknown_key_is_refused(setup: SSHSetup, tmp_path: Path) -> None:
    stranger, _ = make_keys(tmp_path / "stranger")
    code, out, err = await ssh(setup, "echo hi", key=stranger)
    assert code == 255 and out == ""
    assert "Permission denied" in err


async def test_strict_host_key_checking_rejects_another_host_key(
    setup: SSHSetup, tmp_path: Path
) -> None:
    good = setup.known_hosts.read_text()
    setup.known_hosts.write_text(
        good.split(" ")[0]
        + " ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFuB0Yvu8rB8fJ0yOVQpVtJFqkDfakH0stKeyTestOnly0\n"
    )
    code, out, _ = await ssh(setup, "echo hi")
    assert code == 255 and out == ""


async def test_sftp_put_get_list_rename_remove(
    setup: SSHSetup, tmp_path: Path, dirs: tuple[str, str]
) -> None:
    root, _ = dirs
    local = tmp_path / "local.bin"
    data = os.urandom(200_000)
    local.write_bytes(data)
    fetched = tmp_path / "fetched.bin"
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    code, out, err = await sftp(
        setup,
        tmp_path,
        f"put {local} up.bin\n"
        "mkdir sub\n"
        "rename up.bin sub/moved.bin\n"
        "ls sub\n"
        f"get sub/moved.bin {fetched}\n"
        f"put {empty} empty\n"
        "rm empty\n",
    )
    assert code == 0, err
    assert "moved.bin" in out
    assert fetched.read_bytes() == data
    assert read_in(root, "sub/moved.bin") == data
    assert not exists_in(root, "empty")
    code, _, err = await sftp(setup, tmp_path, "rm sub/moved.bin\nrmdir sub\n")
    assert code == 0, err
    assert not exists_in(root, "sub")


async def test_sftp_large_put_get_and_resume(
    setup: SSHSetup, tmp_path: Path, dirs: tuple[str, str]
) -> None:
    """A file of many chunks both ways, byte-identical; then a partial remote file completed by
    ``reput`` (writes over existing content at an offset) and a partial local one by ``reget``
    (a first read far into the file)."""
    root, _ = dirs
    data = os.urandom(9 * 1024 * 1024 + 4321)
    local, fetched = tmp_path / "large.bin", tmp_path / "large.got"
    local.write_bytes(data)
    code, _, err = await sftp(setup, tmp_path, f"put {local} large.bin\nget large.bin {fetched}\n")
    assert code == 0, err
    assert read_in(root, "large.bin") == data
    assert fetched.read_bytes() == data
    write_in(root, "large.bin", data[: 3 * 1024 * 1024 + 7])
    fetched.write_bytes(data[: 6 * 1024 * 1024 + 3])
    code, _, err = await sftp(
        setup, tmp_path, f"reput {local} large.bin\nreget large.bin {fetched}\n"
    )
    assert code == 0, err
    assert read_in(root, "large.bin") == data
    assert fetched.read_bytes() == data


@pytest.mark.parametrize(
    "cipher", ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com"]
)
async def test_every_cipher_carries_large_transfers_through_rekeys(
    setup: SSHSetup, tmp_path: Path, dirs: tuple[str, str], cipher: str
) -> None:
    """Under each cipher OpenSSH offers, while it asks for new keys every 512 KiB, OpenSSH
    decrypts what the broker sends and the broker what OpenSSH sends (AES-GCM packets are sealed
    and opened by ``opsbroker.sshpackets``): command output, an SFTP download and an SFTP upload
    of several MiB, byte-identical."""
    root, _ = dirs
    text = os.urandom(3 * 1024 * 1024).hex() + "\n"
    write_in(root, "big.txt", text.encode())
    options = ["-c", cipher, "-o", "RekeyLimit=512K", "-v"]
    code, out, err = await ssh(setup, "cat big.txt", options=options)
    assert (code, out == text) == (0, True), err[-2000:]
    assert f"cipher: {cipher}" in err
    assert err.count("SSH2_MSG_NEWKEYS received") >= 3  # the first key, then rekeys
    fetched = tmp_path / "big.got"
    code, _, err = await sftp(
        setup, tmp_path, f"get big.txt {fetched}\nput {fetched} up.txt\n", options
    )
    assert code == 0, err[-2000:]
    assert fetched.read_text() == text
    assert read_in(root, "up.txt") == text.encode()


@pytest.mark.parametrize(
    "command",
    [
        "get out/secret {local}",
        "get etc/passwd {local}",
        "get ../OUTSIDE/secret {local}",
        "get {outside}/secret {local}",
        "get /etc/passwd {local}",
        "put {upload} out/planted",
        "put {upload} ../OUTSIDE/planted",
        "put {upload} {outside}/planted",
        "rm out/secret",
        "rm {outside}/secret",
        "rename out/secret stolen",
        "mkdir ../OUTSIDE/newdir",
        "cd ..",
        "ls {outside}",
        "symlink /etc/passwd link",
        "chmod 777 out",
    ],
)
async def test_sftp_escapes_are_refused(
    setup: SSHSetup, tmp_path: Path, dirs: tuple[str, str], command: str
) -> None:
    root, outside = dirs
    upload = tmp_path / "upload"
    upload.write_bytes(b"planted")
    local = tmp_path / "got"
    before = tree_digest(outside)
    line = command.format(local=local, outside=outside, upload=upload)
    code, out, err = await sftp(setup, tmp_path, line + "\n")
    assert code != 0, (out, err)
    assert not local.exists()
    assert tree_digest(outside) == before
    assert not exists_in(root, "stolen") and not exists_in(root, "link")


async def test_killing_the_client_kills_the_command_tree(setup: SSHSetup) -> None:
    mark = marker()
    argv = [SSH, "-T", *_options(setup), "-p", str(setup.port), "agent@127.0.0.1"]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        f"setsid sleep {mark} & sleep {mark}",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert await wait_for(lambda: len(pids_with(mark)) == 2, 10)
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert await wait_for(lambda: pids_with(mark) == [], 1.0), pids_with(mark)


async def test_opsbroker_serve_ssh(tmp_path: Path, dirs: tuple[str, str]) -> None:
    """``opsbroker serve --ssh`` alone serves SSH (no gRPC), with a generated private host key."""
    root, _ = dirs
    client_key, authorized = make_keys(tmp_path / "keys")
    host_key = tmp_path / "state" / "host_key"
    audit = tmp_path / "audit.jsonl"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([os.getcwd(), os.path.join(os.getcwd(), "proto")]),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "opsbroker",
        "serve",
        "--root",
        root,
        "--ssh",
        "127.0.0.1:0",
        "--ssh-authorized-keys",
        str(authorized),
        "--ssh-host-key",
        str(host_key),
        "--audit-log",
        str(audit),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(20):
            lines = []
            while not lines or "principals" not in lines[-1]:
                lines.append((await proc.stdout.readline()).decode())
                assert lines[-1], "the broker exited early"
        assert not any("grpc" in line for line in lines)
        port = int(lines[0].rsplit(":", 1)[1])
        setup = client_setup(port, client_key, host_key, tmp_path / "known_hosts")
        assert await ssh(setup, "echo hi") == (0, "hi\n", "")
        assert stat.S_IMODE(host_key.stat().st_mode) == 0o600
        records = [json.loads(line) for line in audit.read_text().splitlines()]
        assert any(
            (r.get("transport"), r.get("principal"), r.get("op")) == ("ssh", "agent@test", "exec")
            for r in records
        ), records
    finally:
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            await proc.wait()
