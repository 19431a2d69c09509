"""SFTP without whole files in memory: downloads stream, uploads spool to an anonymous temp file.

The bytes must be those a local file would give whatever the access pattern (seeks back and
forth, reads past the end, writes with holes), the temp files must all be closed when a file or
a session ends, the policy's write limit must refuse an upload with a clear error, and the
broker's memory must not grow with the size of the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import random
from collections.abc import AsyncIterator
from pathlib import Path

import asyncssh
import pytest

from broker import Broker
from broker._frontends import _sftpfile, _spool
from broker._frontends._sftp import MAX_OPEN_FILES
from operations import Backend, GuardedBackend, Policy, Unavailable
from tests.conformance._workspace import DiskWorkspace
from tests.grpc._serve_process import serve_process
from tests.grpc.test_streaming import _status
from tests.ssh._harness import (
    SSHSetup,
    exists_in,
    make_keys,
    read_in,
    serve_over_ssh,
    write_in,
)
from tests.ssh._procs import wait_for

MiB = 1024 * 1024
BIG_FILE_BYTES = 256 * MiB
RSS_GROWTH_LIMIT = 64 * MiB  # the broker's peak RSS over its idle RSS, for 256 MiB each way
BIG_TRANSFER_TIMEOUT_S = 600.0  # both ways through Python SSH on a shared 2-core machine
STEPS = 300  # random operations per access-pattern test


@pytest.fixture
def root(tmp_path: Path) -> str:
    return DiskWorkspace.create_dirs(tmp_path)[0]


@pytest.fixture
async def setup(tmp_path: Path, root: str) -> AsyncIterator[SSHSetup]:
    async with Broker(root) as broker, serve_over_ssh(broker, tmp_path / "keys") as running:
        yield running


@pytest.fixture(params=["default", "tiny-window"])
def window(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The real window and pieces, and tiny ones (odd sizes) so reads cross the window and
    piece boundaries, and reads back restart the stream."""
    if request.param == "tiny-window":
        monkeypatch.setattr(_sftpfile, "READ_PIECE_BYTES", 1000)
        monkeypatch.setattr(_sftpfile, "READ_WINDOW_BYTES", 3333)
    return str(request.param)


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _temp_files(root: str) -> set[str]:
    """This process's open files in the spool directory (pytest's capture holds some too)."""
    directory = _spool.spool_directory(root) + "/"
    workspace = os.path.realpath(root) + "/"
    found = set()
    for fd in _open_fds():
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(directory) and not target.startswith(workspace):
                found.add(target)
    return found


async def test_random_reads_give_the_bytes_of_a_local_file(
    setup: SSHSetup, root: str, window: str
) -> None:
    size = 9 * MiB + 12345  # more than the default window: reads back come from the spool
    data = random.Random(1).randbytes(size)
    write_in(root, "data.bin", data)
    rng = random.Random(2)
    async with (
        setup.raw() as conn,
        conn.start_sftp_client() as sftp,
        sftp.open("data.bin", "rb", block_size=64 * 1024) as remote,
    ):
        assert (await remote.stat()).size == size  # before the stream reached the end
        # in order first, then anywhere: back, ahead, across the end, past it
        offset = 0
        for _ in range(40):
            got = await remote.read(50_000, offset)
            assert got == data[offset : offset + 50_000]
            offset += len(got)
        for _ in range(STEPS):
            offset = rng.choice([rng.randrange(size + 10_000), rng.randrange(offset + 1)])
            length = rng.choice([1, 17, 4096, 70_000, 300_000])
            assert await remote.read(length, offset) == data[offset : offset + length]
        assert await remote.read(10, size) == b""
        assert await remote.read(10, size + MiB) == b""
        assert await remote.read(-1, 0) == data
    assert read_in(root, "data.bin") == data


async def test_random_writes_give_the_bytes_of_a_local_file(
    setup: SSHSetup, root: str, window: str
) -> None:
    rng = random.Random(3)
    model = bytearray()

    def apply(offset: int, piece: bytes) -> None:
        if offset > len(model):
            model.extend(bytes(offset - len(model)))  # a hole reads as zeros
        model[offset : offset + len(piece)] = piece

    async with setup.raw() as conn, conn.start_sftp_client() as sftp:
        async with sftp.open("new.bin", "wb") as remote:
            for _ in range(STEPS):
                offset = rng.randrange(len(model) + 200_000)
                piece = rng.randbytes(rng.choice([1, 100, 5000, 70_000]))
                await remote.write(piece, offset)
                apply(offset, piece)
                assert (await remote.stat()).size == len(model)  # fstat: the size so far
            assert not exists_in(root, "new.bin")  # nothing before close
        assert read_in(root, "new.bin") == model

        # Over existing content (no truncation): reads on the handle see the writes.
        async with sftp.open("new.bin", "r+b") as remote:
            for _ in range(STEPS // 3):
                offset = rng.randrange(len(model) + 50_000)
                piece = rng.randbytes(rng.choice([1, 3000, 90_000]))
                await remote.write(piece, offset)
                apply(offset, piece)
                start = rng.randrange(len(model))
                assert await remote.read(100_000, start) == model[start : start + 100_000]
        assert read_in(root, "new.bin") == model

        # Opened for writing but left unchanged: nothing is rewritten.
        before = os.stat(os.path.join(root, "new.bin")).st_ino
        async with sftp.open("new.bin", "r+b") as remote:
            assert await remote.read(10, 0) == model[:10]
        assert os.stat(os.path.join(root, "new.bin")).st_ino == before


async def test_asyncssh_copy_and_get_with_and_without_sparse_ranges(
    setup: SSHSetup, root: str, tmp_path: Path
) -> None:
    """asyncssh's server-side copy (``copy-data``: one handle read, another written) and its
    ``get``, which asks the open file for data ranges (``ranges@asyncssh.com``) unless told not
    to."""
    data = os.urandom(9 * MiB + 5)
    write_in(root, "a.bin", data)
    async with setup.raw() as conn, conn.start_sftp_client() as sftp:
        assert sftp.supports_remote_copy
        await sftp.copy("a.bin", "b.bin")
        for sparse in (True, False):
            await sftp.get("a.bin", str(tmp_path / f"got-{sparse}"), sparse=sparse)
            assert read_in(str(tmp_path), f"got-{sparse}") == data
    assert read_in(root, "b.bin") == data


async def test_temp_files_and_streams_are_closed_on_close_and_on_session_end(
    setup: SSHSetup, root: str
) -> None:
    write_in(root, "big.bin", os.urandom(8 * MiB))  # more than the window
    write_in(root, "small.txt", b"small")
    async with setup.raw() as conn, conn.start_sftp_client() as sftp:
        await sftp.listdir(".")
        idle = _open_fds()
        idle_temp = _temp_files(root)
        async with sftp.open("big.bin", "rb") as remote:
            await remote.read(MiB, 7 * MiB)
            await remote.read(10, 0)  # behind the window: the file is read again
            assert len(_open_fds() - idle) >= 1  # the file's stream
            assert _temp_files(root) == idle_temp  # a download keeps nothing on disk
        async with sftp.open("up.bin", "wb") as remote:
            await remote.write(b"x" * MiB, 0)
        assert _open_fds() == idle
        async with sftp.open("small.txt", "rb") as remote:  # read whole at open, nothing held
            assert _open_fds() == idle
            assert (await remote.stat()).size == 5
            assert await remote.read(100, 0) == b"small"
        # Left open when the session ends: a download half read, uploads half written.
        reading = await sftp.open("big.bin", "rb")
        await reading.read(MiB, 6 * MiB)
        writing = await sftp.open("partial.bin", "wb")
        await writing.write(b"half", 0)
        rewriting = await sftp.open("up.bin", "r+b")
        await rewriting.write(b"changed", 0)
        assert len(_open_fds() - idle) >= 3  # a stream, two spools
        assert len(_temp_files(root) - idle_temp) == 2
    assert await wait_for(lambda: not setup.frontend._connections, 5)
    assert await wait_for(lambda: _open_fds() <= idle, 5), _open_fds() - idle
    assert not exists_in(root, "partial.bin")
    assert read_in(root, "up.bin") == b"x" * MiB  # the unclosed rewrite is dropped


async def test_a_session_holds_at_most_max_open_files(setup: SSHSetup, root: str) -> None:
    write_in(root, "f.txt", b"x" * (2 * MiB))
    async with setup.raw() as conn, conn.start_sftp_client() as sftp:
        files = [await sftp.open("f.txt", "rb") for _ in range(MAX_OPEN_FILES)]
        with pytest.raises(asyncssh.SFTPFailure, match=r"64 files are already open .* close one"):
            await sftp.open("f.txt", "rb")
        await files.pop().close()
        files.append(await sftp.open("f.txt", "rb"))
        for file in files:
            await file.close()
        async with sftp.open("f.txt", "rb") as again:
            assert await again.read(3, 0) == b"xxx"


async def test_an_upload_over_the_write_limit_fails_and_keeps_the_old_file(
    tmp_path: Path, root: str
) -> None:
    limit = 2 * MiB
    write_in(root, "kept.bin", b"old content")

    def guard(core: Backend, principal: str, peer: str | None) -> Backend:
        policy = Policy(max_write_bytes=limit)
        return GuardedBackend(core, policy, principal=principal, close_inner=False)

    async with (
        Broker(root) as broker,
        serve_over_ssh(broker, tmp_path / "keys", guard=guard) as setup,
        setup.raw() as conn,
        conn.start_sftp_client() as sftp,
    ):
        idle = _open_fds()
        remote = await sftp.open("kept.bin", "wb")
        await remote.write(os.urandom(limit + 1), 0)
        with pytest.raises(asyncssh.SFTPFailure, match=r"max_write_bytes \(2097152\)") as caught:
            await remote.close()
        assert "kept.bin" in caught.value.reason
        assert _open_fds() == idle
        async with sftp.open("kept.bin", "wb") as remote:  # at the limit: accepted
            await remote.write(b"y" * limit, 0)
    assert read_in(root, "kept.bin") == b"y" * limit
    assert sorted(os.listdir(root)) == ["kept.bin"]  # no leftover temp file in the workspace


async def test_a_download_over_the_read_limit_fails_and_keeps_failing(
    tmp_path: Path, root: str
) -> None:
    """The policy's ``max_read_bytes`` ends the stream part way: that read and every later one
    fail with the policy's reason, never an end of file that would pass for a short file."""
    write_in(root, "big.bin", os.urandom(8 * MiB))

    def guard(core: Backend, principal: str, peer: str | None) -> Backend:
        return GuardedBackend(core, Policy(max_read_bytes=6 * MiB), close_inner=False)

    async with (
        Broker(root) as broker,
        serve_over_ssh(broker, tmp_path / "keys", guard=guard) as setup,
        setup.raw() as conn,
        conn.start_sftp_client() as sftp,
        sftp.open("big.bin", "rb") as remote,
    ):
        assert len(await remote.read(4 * MiB, 0)) == 4 * MiB
        for offset in (4 * MiB, 7 * MiB, 9 * MiB, 0):
            with pytest.raises(asyncssh.SFTPFailure, match=r"max_read_bytes \(6291456\)"):
                await remote.read(4 * MiB, offset)


async def test_the_spool_keeps_its_free_space_reserve(
    setup: SSHSetup, root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Uploads past the reserve are refused with a message saying why; a download, which
    spools nothing, is read in order and back all the same."""
    data = os.urandom(16 * MiB)
    write_in(root, "big.bin", data)
    write_in(root, "kept.bin", b"old")
    async with setup.raw() as conn, conn.start_sftp_client() as sftp:
        async with sftp.open("kept.bin", "wb") as remote:
            # a sparse file of an exabyte: refused under the real reserve already
            with pytest.raises(asyncssh.SFTPFailure, match=r"temp disk \(.*\) would keep less"):
                await remote.write(b"x", 2**60)
            free = os.statvfs(_spool.spool_directory(root))
            monkeypatch.setattr(_spool, "SPOOL_FREE_RESERVE_BYTES", free.f_bavail * free.f_frsize)
            monkeypatch.setattr(_spool, "SPOOL_FREE_RESERVE_FRACTION", 1.0)
            with pytest.raises(asyncssh.SFTPFailure, match="move TMPDIR to a larger disk"):
                await remote.write(os.urandom(MiB), 0)
        async with sftp.open("big.bin", "rb") as remote:
            assert await remote.read() == data
            assert await remote.read(10, 0) == data[:10]
        with pytest.raises(asyncssh.SFTPFailure, match="temp disk"):
            await sftp.open("big.bin", "r+b")  # its content must be spooled first
    assert read_in(root, "kept.bin") == b""  # an empty upload was still the client's
    assert read_in(root, "big.bin") == data


def test_the_spool_is_never_inside_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "ROOT"
    (root / "tmp").mkdir(parents=True)
    monkeypatch.setattr("tempfile.tempdir", str(root / "tmp"))
    with pytest.raises(
        Unavailable, match="inside the workspace root; start the broker with TMPDIR"
    ):
        _spool.spool_directory(str(root))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    assert _spool.spool_directory(str(root)) == os.path.realpath(tmp_path)


def _random_file(path: Path, size: int) -> str:
    """Write ``size`` random bytes to ``path``; their sha256."""
    digest = hashlib.sha256()
    with path.open("wb") as file:
        for _ in range(size // MiB):
            piece = os.urandom(MiB)
            digest.update(piece)
            file.write(piece)
    return digest.hexdigest()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for piece in iter(lambda: file.read(MiB), b""):
            digest.update(piece)
    return digest.hexdigest()


def _ssh_address(lines: list[str]) -> tuple[str, int]:
    line = next(line for line in lines if " on ssh " in line)
    host, port = line.rsplit(" on ssh ", 1)[1].rsplit(":", 1)
    return host, int(port)


async def test_256_mib_each_way_with_bounded_broker_memory(tmp_path: Path) -> None:
    """``opsbroker serve --ssh`` in its own process: a 256 MiB upload then download through an
    asyncssh SFTP client, byte-identical, while the broker's peak RSS stays within 64 MiB of
    its RSS before the transfers."""
    root = tmp_path / "ROOT"
    root.mkdir()
    policy = tmp_path / "policy.toml"
    policy.write_text(
        f"max_read_bytes = {2 * BIG_FILE_BYTES}\nmax_write_bytes = {2 * BIG_FILE_BYTES}\n"
    )
    client_key, authorized = make_keys(tmp_path / "keys")
    host_key = tmp_path / "keys" / "host"
    local, fetched = tmp_path / "local.bin", tmp_path / "fetched.bin"
    sent = _random_file(local, BIG_FILE_BYTES)
    warm = tmp_path / "warm.bin"
    warm.write_bytes(os.urandom(4 * MiB))
    ssh_options = ["--ssh", "127.0.0.1:0", "--ssh-authorized-keys", str(authorized)]
    async with serve_process(
        root,
        tmp_path / "state" / "tokens",
        *ssh_options,
        "--ssh-host-key",
        str(host_key),
        "--policy",
        str(policy),
        "--quiet",
    ) as served:
        host, port = _ssh_address(served.lines)
        public = asyncssh.read_private_key(host_key).export_public_key().decode().strip()
        known_hosts = tmp_path / "known_hosts"
        known_hosts.write_text(f"[{host}]:{port} {public}\n")
        pid = served.process.pid
        async with (
            asyncssh.connect(
                host,
                port,
                username="agent",
                client_keys=[str(client_key)],
                known_hosts=str(known_hosts),
            ) as conn,
            conn.start_sftp_client() as sftp,
        ):
            await sftp.put(str(warm), "warm.bin")  # code paths loaded, buffers at their size
            await sftp.get("warm.bin", str(tmp_path / "warm.got"))
            baseline = _status(pid, "VmRSS")
            loop = asyncio.get_running_loop()
            async with asyncio.timeout(BIG_TRANSFER_TIMEOUT_S):
                started = loop.time()
                await sftp.put(str(local), "big.bin")
                put_s = loop.time() - started
                assert _sha256(root / "big.bin") == sent
                started = loop.time()
                await sftp.get("big.bin", str(fetched))
                get_s = loop.time() - started
            peak = _status(pid, "VmHWM")
        assert _sha256(fetched) == sent
        growth = peak - baseline
        print(
            f"broker RSS {baseline >> 20} MiB before, peak {peak >> 20} MiB during; "
            f"put {BIG_FILE_BYTES / MiB / put_s:.0f} MiB/s, get {BIG_FILE_BYTES / MiB / get_s:.0f} MiB/s"
        )
        assert growth < RSS_GROWTH_LIMIT, f"broker RSS grew {growth >> 20} MiB"
    assert served.process.returncode == 0
