"""The SSH front-end and client over loopback: parity with the core, concurrency, cancellation
(task cancel, abort, channel close, signal request, dropped connection), auth and host keys."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from pathlib import Path

import asyncssh
import pytest
from opsbroker.v1 import broker_pb2 as pb
from opsbroker.v1 import codec
from opsbroker.v1.sshframe import (
    NEED_DATA,
    Cancel,
    End,
    EndOfInput,
    Event,
    FrameConnection,
    Message,
    Request,
    Role,
    State,
)

from agent_side import connect
from agent_side._remote import ssh as ssh_client
from agent_side._remote.ssh import SSHBackend
from broker import Broker
from broker._frontends._service import Service
from broker._frontends._sshchannels import COALESCE_BYTES, NO_SHELL_MESSAGE
from broker._frontends.ssh import CHANNEL_MAX_PACKET, READ_CHUNK_BYTES, load_or_create_host_key
from operations import (
    AbortController,
    Backend,
    EscapesRoot,
    ExecResult,
    InvalidArgument,
    IsADirectory,
    KillReason,
    NotFound,
    OpsError,
    TooLarge,
    Unauthenticated,
    Unavailable,
)
from tests.conformance._workspace import DiskWorkspace, tree_digest
from tests.ssh._harness import SSHSetup, broker_over_ssh, make_keys, serve_over_ssh
from tests.ssh._procs import marker, pids_with, wait_for


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[str, str]:
    return DiskWorkspace.create_dirs(tmp_path)


async def _outcome(coro: object) -> object:
    """A call's result, or its error as (type, op, path, reason): what must match across backends."""
    assert asyncio.iscoroutine(coro)
    try:
        return await coro
    except OpsError as exc:
        return (type(exc).__name__, exc.op, exc.path, exc.reason)


async def test_same_results_as_the_core(tmp_path: Path, dirs: tuple[str, str]) -> None:
    root, outside = dirs
    ws = DiskWorkspace(None, root, outside)  # type: ignore[arg-type]
    ws.make(["d/", "d/f", "link => d/f", "esc => $OUT/secret", "loop => loop", "big"])
    (Path(root) / "big").write_bytes(os.urandom(300_000))
    before = tree_digest(outside)
    async with broker_over_ssh(tmp_path, root) as (_, remote), Broker(root) as local:
        for name, call in [
            ("read", lambda b: b.read_file(f"{root}/d/f")),
            ("read big", lambda b: b.read_file(f"{root}/big")),
            ("read link", lambda b: b.read_file(f"{root}/link")),
            ("read escape", lambda b: b.read_file(f"{root}/esc")),
            ("read dotdot", lambda b: b.read_file(f"{root}/../OUTSIDE/secret")),
            ("read abs", lambda b: b.read_file(f"{outside}/secret")),
            ("read dir", lambda b: b.read_file(f"{root}/d")),
            ("read loop", lambda b: b.read_file(f"{root}/loop")),
            ("read missing", lambda b: b.read_file(f"{root}/nope")),
            ("stat", lambda b: b.stat(f"{root}/d/f")),
            ("lstat link", lambda b: b.lstat(f"{root}/link")),
            ("exists", lambda b: b.exists(f"{root}/esc")),
            ("is_directory", lambda b: b.is_directory(f"{root}/d")),
            ("readdir", lambda b: b.readdir(f"{root}/d")),
            ("list_dir", lambda b: b.list_dir(f"{root}/d")),
            ("glob", lambda b: b.glob("**/*", root)),
            ("access", lambda b: b.access(f"{root}/d/f", writable=True)),
            ("mime", lambda b: b.detect_image_mime_type(f"{root}/d/f")),
            ("write escape", lambda b: b.write_file(f"{root}/esc", b"pwned")),
            ("mkdir escape", lambda b: b.mkdir(f"{root}/../OUTSIDE/new")),
            ("rename escape", lambda b: b.rename(f"{root}/d/f", f"{outside}/f")),
            ("remove escape", lambda b: b.remove(f"{root}/../OUTSIDE/secret")),
        ]:
            want = await _outcome(call(local))
            got = await _outcome(call(remote))
            if name == "stat":
                assert isinstance(got, type(want))
            else:
                assert got == want, name
        matches = [m async for m in remote.search("f", root)]
        assert matches == [m async for m in local.search("f", root)]
        with pytest.raises(InvalidArgument):
            [m async for m in remote.search("(", root)]
    assert tree_digest(outside) == before


def test_a_read_piece_fills_one_packet_of_our_client() -> None:
    """ReadFile's pieces, framed, are exactly one SSH packet of the client's size (a 9-byte spill
    would cost a second packet per piece) and are written at once, not held for coalescing."""
    frames = FrameConnection(Role.SERVER)
    frames.states.update({Role.CLIENT: State.DONE, Role.SERVER: State.SEND})
    piece = pb.Chunk(data=bytes(READ_CHUNK_BYTES)).SerializeToString()
    wire = frames.send(Message(piece))
    assert len(wire) == ssh_client.CHANNEL_MAX_PACKET
    assert len(wire) >= COALESCE_BYTES
    assert READ_CHUNK_BYTES <= codec.CHUNK_BYTES  # what Capabilities advertises


def test_a_write_piece_fills_one_packet_of_the_broker() -> None:
    """WriteFile's pieces after the first, framed, are exactly one SSH packet of the broker's."""
    frames = FrameConnection(Role.CLIENT)
    frames.states.update({Role.CLIENT: State.SEND, Role.SERVER: State.SEND})
    piece = pb.WriteFileRequest(data=bytes(ssh_client.WRITE_CHUNK_BYTES)).SerializeToString()
    assert len(frames.send(Message(piece))) == CHANNEL_MAX_PACKET


async def test_large_reads_arrive_whole(tmp_path: Path, dirs: tuple[str, str]) -> None:
    """Files around and across the piece size, and one of many pieces, read back intact."""
    root, _ = dirs
    sizes = [READ_CHUNK_BYTES - 1, READ_CHUNK_BYTES, READ_CHUNK_BYTES + 1, 5 * 1024 * 1024 + 3]
    blobs = {size: os.urandom(size) for size in sizes}
    for size, blob in blobs.items():
        (tmp_path / "ROOT" / f"b{size}").write_bytes(blob)
    async with broker_over_ssh(tmp_path, root) as (_, client):
        for size, blob in blobs.items():
            assert await client.read_file(f"{root}/b{size}") == blob


async def test_service_read_chunk_bytes_is_bounded(tmp_path: Path) -> None:
    async with Broker(str(tmp_path)) as broker:
        for bad in (0, codec.CHUNK_BYTES + 1):
            with pytest.raises(ValueError, match="read_chunk_bytes"):
                Service(version="test", root=broker.root, info={}, read_chunk_bytes=bad)


async def test_writes_large_files_and_many_calls_at_once(
    tmp_path: Path, dirs: tuple[str, str]
) -> None:
    root, _ = dirs
    data = os.urandom(3 * 1024 * 1024 + 11)
    async with broker_over_ssh(tmp_path, root) as (setup, client):
        await client.write_file(f"{root}/blob", data)
        assert (tmp_path / "ROOT" / "blob").read_bytes() == data
        await client.write_file(f"{root}/empty", b"")
        assert await client.read_file(f"{root}/empty") == b""
        await asyncio.gather(*(client.write_file(f"{root}/f{i}", f"{i}") for i in range(40)))
        got = await asyncio.gather(*(client.read_file(f"{root}/f{i}") for i in range(40)))
        assert got == [f"{i}".encode() for i in range(40)]
        assert len(setup.frontend._connections) == 1
        with pytest.raises(IsADirectory):
            await client.write_file(root, b"x")
        # The channel that carried the failed call carries the next one.
        assert await client.read_file(f"{root}/f1") == b"1"


async def test_exec_streams_output_and_returns_the_exit_code(
    tmp_path: Path, dirs: tuple[str, str]
) -> None:
    root, _ = dirs
    async with broker_over_ssh(tmp_path, root) as (_, client):
        out: list[bytes] = []
        result = await client.exec(
            "printf a; printf b >&2; echo $FOO; exit 7", root, on_data=out.append, env={"FOO": "x"}
        )
        assert result == ExecResult(7)
        assert b"".join(out) == b"abx\n"
        big: list[bytes] = []

        async def slow(data: bytes) -> None:
            big.append(data)
            await asyncio.sleep(0)

        result = await client.exec("head -c 3000000 /dev/zero", root, on_data=slow)
        assert result.exit_code == 0 and sum(map(len, big)) == 3_000_000
        result = await client.exec("sleep 5", root, on_data=out.append, timeout=0.2)
        assert result == ExecResult(None, KillReason.TIMEOUT)
        with pytest.raises(NotFound):
            await client.exec("true", f"{root}/missing", on_data=out.append)


async def test_abort_signal_kills_the_tree_and_returns_aborted(
    tmp_path: Path, dirs: tuple[str, str]
) -> None:
    root, _ = dirs
    mark = marker()
    async with broker_over_ssh(tmp_path, root) as (_, client):
        controller = AbortController()
        task = asyncio.create_task(
            client.exec(
                f"sleep {mark} & sleep {mark}",
                root,
                on_data=lambda b: None,
                signal=controller.signal,
            )
        )
        assert await wait_for(lambda: len(pids_with(mark)) == 2, 5)
        controller.abort()
        assert await task == ExecResult(None, KillReason.ABORTED)
        assert pids_with(mark) == []


async def test_cancelling_the_task_kills_the_tree_and_reuses_the_channel(
    tmp_path: Path, dirs: tuple[str, str]
) -> None:
    root, _ = dirs
    mark = marker()
    async with broker_over_ssh(tmp_path, root) as (_, client):
        task = asyncio.create_task(
            client.exec(f"setsid sleep {mark} & sleep {mark}", root, on_data=lambda b: None)
        )
        assert await wait_for(lambda: len(pids_with(mark)) == 2, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pids_with(mark) == []  # gone before the cancellation propagated
        assert len(client._frames._idle) == 1
        assert await client.exists(root)


async def _raw_channel(
    setup: SSHSetup,
) -> tuple[asyncssh.SSHClientConnection, asyncssh.SSHClientChannel[bytes], FrameConnection]:
    conn = await setup.raw(encoding=None)
    chan, _ = await conn.create_session(
        asyncssh.SSHClientSession, subsystem="opsbroker", encoding=None
    )
    return conn, chan, FrameConnection(Role.CLIENT)


def _exec_request(frames: FrameConnection, command: str, cwd: str) -> bytes:
    start = pb.ExecRequest(command=command, cwd=cwd)
    return frames.send(Request("Run", start.SerializeToString())) + frames.send(EndOfInput())


@pytest.fixture(params=["close channel", "signal request", "drop connection"])
def how(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_the_broker_kills_the_tree_when_the_client_goes(
    tmp_path: Path, dirs: tuple[str, str], how: str
) -> None:
    root, _ = dirs
    mark = marker()
    async with Broker(root) as broker, serve_over_ssh(broker, tmp_path / "keys") as setup:
        conn, chan, frames = await _raw_channel(setup)
        chan.write(_exec_request(frames, f"sleep {mark} & sleep {mark}", root))
        assert await wait_for(lambda: len(pids_with(mark)) == 2, 5)
        if how == "close channel":
            chan.close()
        elif how == "signal request":
            chan.send_signal("TERM")
        else:
            conn.abort()
        assert await wait_for(lambda: pids_with(mark) == [], 1.0)
        conn.close()


async def _read_until_end(
    reader: asyncssh.SSHReader[bytes], frames: FrameConnection
) -> list[Event]:
    """Every event up to and including the END of the current call (bounded in time)."""
    got: list[Event] = []
    async with asyncio.timeout(10):
        while not got or not isinstance(got[-1], End):
            frames.receive_data(await reader.read(65536))
            while (event := frames.next_event()) is not NEED_DATA:
                assert isinstance(event, Event)
                got.append(event)
    return got


async def test_cancel_frame_ends_the_call_with_aborted(
    tmp_path: Path, dirs: tuple[str, str]
) -> None:
    root, _ = dirs
    async with (
        Broker(root) as broker,
        serve_over_ssh(broker, tmp_path / "keys") as setup,
        setup.raw() as conn,
    ):
        writer, reader, _ = await conn.open_session(subsystem="opsbroker", encoding=None)
        frames = FrameConnection(Role.CLIENT)
        writer.write(_exec_request(frames, "sleep 30", root) + frames.send(Cancel("test")))
        end = (await _read_until_end(reader, frames))[-1]
        assert isinstance(end, End) and not end.ok
        detail = pb.ErrorDetail()
        detail.ParseFromString(end.error)
        assert (detail.code, detail.op) == ("aborted", "exec")
        # Both sides are done: the channel carries the next call.
        frames.start_next_call()
        request = pb.PathRequest(path=root).SerializeToString()
        writer.write(frames.send(Request("Exists", request)) + frames.send(EndOfInput()))
        got = await _read_until_end(reader, frames)
        assert got[-1] == End() and len(got) == 2


async def test_protocol_errors_close_the_channel(tmp_path: Path, dirs: tuple[str, str]) -> None:
    root, _ = dirs
    async with (
        Broker(root) as broker,
        serve_over_ssh(broker, tmp_path / "keys") as setup,
        setup.raw() as conn,
    ):
        writer, reader, _ = await conn.open_session(subsystem="opsbroker", encoding=None)
        writer.write(b"\x00\x00\x00\x01\x09")  # unknown frame kind
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer, reader, _ = await conn.open_session(subsystem="opsbroker", encoding=None)
        frames = FrameConnection(Role.CLIENT)
        writer.write(frames.send(Request("NoSuchMethod")) + frames.send(EndOfInput()))
        frames.receive_data(await asyncio.wait_for(reader.read(65536), 5))
        end = frames.next_event()
        assert isinstance(end, End)
        detail = pb.ErrorDetail()
        detail.ParseFromString(end.error)
        assert detail.code == "invalid_argument" and "unknown method" in detail.reason


async def test_plain_commands_and_refused_shells(tmp_path: Path, dirs: tuple[str, str]) -> None:
    root, _ = dirs
    real_root = str((tmp_path / "ROOT").resolve())
    async with (
        Broker(root) as broker,
        serve_over_ssh(broker, tmp_path / "keys") as setup,
        setup.raw() as conn,
    ):
        result = await conn.run("pwd; echo oops >&2; exit 3")
        assert result.exit_status == 3
        assert result.stdout == f"{real_root}\noops\n"
        shell = await conn.run()
        assert shell.exit_status == 1
        assert shell.stderr == NO_SHELL_MESSAGE
        with pytest.raises(asyncssh.ChannelOpenError):
            await conn.open_connection("127.0.0.1", 9)


async def test_plain_command_timeout(tmp_path: Path, dirs: tuple[str, str]) -> None:
    root, _ = dirs
    mark = marker()
    async with (
        Broker(root) as broker,
        serve_over_ssh(broker, tmp_path / "keys", command_timeout=0.3) as setup,
        setup.raw() as conn,
    ):
        result = await conn.run(f"sleep {mark}")
        assert result.exit_status == 124
        assert "killed (timeout)" in str(result.stderr)
        assert pids_with(mark) == []


async def test_unknown_key_and_untrusted_host_are_refused(
    tmp_path: Path, dirs: tuple[str, str]
) -> None:
    root, _ = dirs
    async with Broker(root) as broker, serve_over_ssh(broker, tmp_path / "keys") as setup:
        stranger, _ = make_keys(tmp_path / "stranger")
        client = SSHBackend(
            "127.0.0.1",
            setup.port,
            username="agent",
            client_keys=[str(stranger)],
            known_hosts=str(setup.known_hosts),
        )
        with pytest.raises(Unauthenticated, match="key refused"):
            await client.connect()
        other_hosts = tmp_path / "other_known_hosts"
        other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
        other_hosts.write_text(f"[127.0.0.1]:{setup.port} {other}")
        client = SSHBackend(
            "127.0.0.1",
            setup.port,
            username="agent",
            client_keys=[str(setup.client_key)],
            known_hosts=str(other_hosts),
        )
        with pytest.raises(Unauthenticated, match="host key not trusted"):
            await client.connect()
        url = f"ssh://agent@127.0.0.1:{setup.port}"
        async with connect(
            url, client_keys=[str(setup.client_key)], known_hosts=str(setup.known_hosts)
        ) as ws:
            assert ws.root == broker.root
            assert setup.frontend._connections
            server = next(iter(setup.frontend._connections))
            owner = server.get_owner()
            assert getattr(owner, "principal", None) == "agent@test"


async def test_host_key_is_generated_private_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "host_key"
    key = load_or_create_host_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_host_key(path).public_data == key.public_data


async def test_accepted_sockets_have_tcp_nodelay(tmp_path: Path, dirs: tuple[str, str]) -> None:
    root, _ = dirs
    async with broker_over_ssh(tmp_path, root) as (setup, _):
        (conn,) = setup.frontend._connections
        sock = conn.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


async def test_escape_attempts_leave_the_outside_untouched(
    tmp_path: Path, dirs: tuple[str, str]
) -> None:
    root, outside = dirs
    os.symlink(outside, f"{root}/out")
    before = tree_digest(outside)
    async with broker_over_ssh(tmp_path, root) as (_, client):
        for path in (f"{root}/out/secret", f"{root}/../OUTSIDE/secret", f"{outside}/secret"):
            with pytest.raises(EscapesRoot):
                await client.write_file(path, b"pwned")
            with pytest.raises(EscapesRoot):
                await client.remove(path)
    assert tree_digest(outside) == before


async def test_each_connection_works_on_its_guarded_backend(
    tmp_path: Path, dirs: tuple[str, str]
) -> None:
    root, _ = dirs
    seen: list[tuple[str, str | None]] = []

    def guard(core: Backend, principal: str, peer: str | None) -> Backend:
        seen.append((principal, peer))
        return core

    async with (
        Broker(root) as broker,
        serve_over_ssh(broker, tmp_path / "keys", guard=guard) as setup,
        setup.backend() as client,
    ):
        await asyncio.gather(*(client.exists(root) for _ in range(5)))
        async with setup.raw() as conn:
            assert (await conn.run("true")).exit_status == 0
    assert [principal for principal, _ in seen] == ["agent@test", "agent@test"]
    assert all(peer is not None and peer.startswith("127.0.0.1:") for _, peer in seen)


async def test_stopping_the_front_end_kills_commands_with_reason_shutdown(
    tmp_path: Path, dirs: tuple[str, str]
) -> None:
    root, _ = dirs
    mark = marker()
    async with broker_over_ssh(tmp_path, root) as (setup, client):
        task = asyncio.create_task(client.exec(f"sleep {mark}", root, on_data=lambda b: None))
        assert await wait_for(lambda: len(pids_with(mark)) == 1, 5)
        await setup.frontend.aclose()
        assert await task == ExecResult(None, KillReason.SHUTDOWN)
        assert pids_with(mark) == []
        with pytest.raises(Unavailable):
            await client.exists(root)


async def test_capabilities_describe_the_core(tmp_path: Path, dirs: tuple[str, str]) -> None:
    root, _ = dirs
    async with broker_over_ssh(tmp_path, root) as (_, client):
        reply = await client._unary("Capabilities", pb.CapabilitiesRequest(), pb.CapabilitiesReply)
        assert reply.root == root and reply.resolver in ("openat2", "walk")
        assert reply.limits.chunk_bytes == codec.CHUNK_BYTES


async def test_long_lines_and_the_frame_limit(tmp_path: Path, dirs: tuple[str, str]) -> None:
    root, _ = dirs
    line = b"x" * (codec.CHUNK_BYTES + 40_000) + b" needle"
    (tmp_path / "ROOT" / "long.txt").write_bytes(line + b"\n")
    async with (
        Broker(root) as broker,
        serve_over_ssh(broker, tmp_path / "keys", max_frame_size=codec.CHUNK_BYTES + 4096) as setup,
        setup.backend() as client,
    ):
        # Files travel in CHUNK_BYTES chunks, so the frame limit never matters for them...
        assert len(await client.read_file(f"{root}/long.txt")) == len(line) + 1
        # ...but one search match holds a whole line.
        with pytest.raises(TooLarge, match="exceeds the frame limit"):
            [m async for m in client.search("needle", root)]
        assert await client.exists(root)
    async with broker_over_ssh(tmp_path / "default", root) as (_, client):
        (match,) = [m async for m in client.search("needle", root)]
        assert match.line_text is not None and len(match.line_text) == len(line)


async def test_sftp_upload_without_close_is_not_committed(
    tmp_path: Path, dirs: tuple[str, str]
) -> None:
    root, _ = dirs
    async with (
        Broker(root) as broker,
        serve_over_ssh(broker, tmp_path / "keys") as setup,
    ):
        async with setup.raw() as conn, conn.start_sftp_client() as sftp:
            async with sftp.open("done.txt", "wb") as done:
                await done.write(b"complete")
            unfinished = await sftp.open("partial.txt", "wb")
            await unfinished.write(b"half of it")
            assert await sftp.listdir(".")
        # The connection ended with partial.txt still open.
        assert await wait_for(lambda: not setup.frontend._connections, 5)
    assert (tmp_path / "ROOT" / "done.txt").read_bytes() == b"complete"
    assert not (tmp_path / "ROOT" / "partial.txt").exists()


async def test_a_client_that_does_not_log_in_is_dropped(
    tmp_path: Path, dirs: tuple[str, str]
) -> None:
    root, _ = dirs
    async with (
        Broker(root) as broker,
        serve_over_ssh(broker, tmp_path / "keys", login_timeout=0.5) as setup,
    ):
        reader, writer = await asyncio.open_connection("127.0.0.1", setup.port)
        try:
            assert (await reader.readline()).startswith(b"SSH-2.0-")
            writer.write(b"SSH-2.0-silent\r\n")  # then say nothing more
            async with asyncio.timeout(5):
                while await reader.read(65536):
                    pass  # the server's key exchange offer, then EOF
        finally:
            writer.close()
