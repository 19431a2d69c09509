"""Authentication: refused callers get UNAUTHENTICATED and the backend performs nothing."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import grpc
import grpc.aio
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from opsbroker.v1 import broker_pb2 as pb
from opsbroker.v1 import broker_pb2_grpc as pb_grpc
from opsbroker.v1.sshframe import EndOfInput, FrameConnection, Request, Role

from agent_side import connect
from operations import InMemoryOperations, PermissionDenied, PolicyDenied, Unauthenticated

from ._harness import client, serving, token_of

pytestmark = pytest.mark.anyio  # explicit, so that parametrized async tests collect correctly


async def _attempt_everything(address: str, token: str | None) -> None:
    """Call a read, a write, a mkdir and an exec (as an RPC and framed) directly; each must be
    refused."""
    metadata = (("authorization", f"Bearer {token}"),) if token is not None else ()
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
        calls = [
            stub.ReadFile(pb.PathRequest(path="/workspace/a"), metadata=metadata).read(),
            stub.ReadSmallFile(pb.PathRequest(path="/workspace/a"), metadata=metadata),
            stub.WriteFile(
                iter([pb.WriteFileRequest(path="/workspace/new", data=b"x")]), metadata=metadata
            ),
            stub.Mkdir(pb.PathRequest(path="/workspace/dir"), metadata=metadata),
            _exec(stub, metadata),
            _framed_exec(stub, metadata),
        ]
        for call in calls:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call
            assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED


async def _framed_exec(stub: object, metadata: tuple[tuple[str, str], ...]) -> None:
    """An exec framed on a ``Frames`` stream, as the gRPC client sends it."""
    frames = FrameConnection(Role.CLIENT)
    request = pb.ExecRequest(command="touch x", cwd="/workspace", abort_id="a")
    data = frames.send(Request("Run", request.SerializeToString())) + frames.send(EndOfInput())
    call = stub.Frames(metadata=metadata)  # type: ignore[attr-defined]
    await call.write(pb.FrameBytes(data=data))
    await call.read()
    await call


async def _exec(stub: object, metadata: tuple[tuple[str, str], ...]) -> None:
    call = stub.Run(  # type: ignore[attr-defined]
        pb.ExecRequest(command="touch x", cwd="/workspace"), metadata=metadata
    )
    await call.read()
    await call


@pytest.mark.parametrize("token", [None, "", "wrong-token", "Bearer"])
async def test_missing_or_wrong_token_is_refused_and_does_nothing(
    tmp_path: Path, token: str | None
) -> None:
    memory = InMemoryOperations({"a": b"secret"})
    async with serving(tmp_path, memory) as server:
        ops = connect(f"grpc://{server.addresses[0]}", token=token)
        with pytest.raises(Unauthenticated):
            await ops.open()
        await ops.aclose()
        await _attempt_everything(server.addresses[0], token)
        assert memory.log == []
        assert memory.snapshot() == {"a": b"secret"}
        assert memory.commands.history == []


async def test_another_brokers_token_is_refused(tmp_path: Path) -> None:
    memory = InMemoryOperations({"a": b"secret"})
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with (
        serving(tmp_path / "a", memory) as server,
        serving(tmp_path / "b", InMemoryOperations()) as other,
    ):
        assert token_of(server) != token_of(other)
        with pytest.raises(Unauthenticated):
            async with client(server, token=token_of(other)):
                pass
        await _attempt_everything(server.addresses[0], token_of(other))
        assert memory.log == []
        async with client(server) as good:
            assert await good.read_file("/workspace/a") == b"secret"


async def test_generated_token_file_is_private(tmp_path: Path) -> None:
    async with serving(tmp_path, InMemoryOperations()) as server:
        assert server.token_file == tmp_path / "tokens"
        assert stat.S_IMODE(os.stat(server.token_file).st_mode) == 0o600
        assert len(token_of(server)) >= 40


async def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("abc alice\n")
    tokens.chmod(0o644)
    with pytest.raises(PermissionDenied, match="chmod 600"):
        async with serving(tmp_path, InMemoryOperations()):
            pass


async def test_tokens_file_names_the_principal(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("# comment\ntok-alice alice\ntok-bob bob\n")
    tokens.chmod(0o600)
    async with serving(tmp_path, InMemoryOperations({"a": b"1"})) as server:
        for token in ("tok-alice", "tok-bob"):
            async with client(server, token=token) as ops:
                assert await ops.read_file("/workspace/a") == b"1"


async def _health(address: str, token: str | None) -> int:
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), metadata=metadata)
        return int(reply.status)


async def test_health_needs_a_token_unless_configured(tmp_path: Path) -> None:
    async with serving(tmp_path, InMemoryOperations()) as server:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _health(server.addresses[0], None)
        assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
        status = await _health(server.addresses[0], token_of(server))
        assert status == health_pb2.HealthCheckResponse.SERVING
    (tmp_path / "open").mkdir()
    async with serving(tmp_path / "open", InMemoryOperations(), health_without_token=True) as srv:
        assert await _health(srv.addresses[0], None) == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(Unauthenticated):
            async with client(srv, token="nope"):
                pass


async def _list_services(address: str, token: str | None) -> list[str]:
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    async with grpc.aio.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        call = stub.ServerReflectionInfo(metadata=metadata)
        await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
        reply = await call.read()
        await call.done_writing()
        assert reply is not grpc.aio.EOF
        return [service.name for service in reply.list_services_response.service]


async def test_reflection_needs_a_token(tmp_path: Path) -> None:
    """Every service on the server authenticates its callers, not only the broker's own."""
    async with serving(tmp_path, InMemoryOperations(), health_without_token=True) as server:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _list_services(server.addresses[0], None)
        assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _list_services(server.addresses[0], "wrong-token")
        assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert "opsbroker.v1.Broker" in await _list_services(server.addresses[0], token_of(server))


async def test_unix_socket_needs_no_token_and_is_private(tmp_path: Path) -> None:
    sock = tmp_path / "b.sock"
    memory = InMemoryOperations({"a": b"1"})
    async with serving(tmp_path, memory, grpc=[f"unix:{sock}"]) as server:
        assert server.addresses == [f"unix:{sock}"]
        assert server.tokens is None
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
        async with connect(f"grpc+unix://{sock}") as ops:
            assert await ops.read_file("/workspace/a") == b"1"


async def test_unix_socket_is_private_from_its_creation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No window in which another user could connect: the socket gRPC creates is 0600 at once,
    even under a permissive umask (checked right after gRPC creates it, before start)."""
    sock = tmp_path / "c.sock"
    modes: list[int] = []
    add = grpc.aio._server.Server.add_insecure_port

    def recording(self: grpc.aio.Server, address: str) -> int:
        port = add(self, address)
        modes.append(stat.S_IMODE(os.stat(sock).st_mode))
        return port

    monkeypatch.setattr(grpc.aio._server.Server, "add_insecure_port", recording)
    previous = os.umask(0o000)
    try:
        async with serving(tmp_path, InMemoryOperations({}), grpc=[f"unix:{sock}"]):
            assert os.umask(0o000) == 0o000  # and the broker gave the process umask back
    finally:
        os.umask(previous)
    assert modes and modes[0] & 0o077 == 0, oct(modes[0])


async def test_policy_and_audit_apply_per_principal(tmp_path: Path) -> None:
    from broker._audit import read_records

    tokens = tmp_path / "tokens"
    tokens.write_text("tok-alice alice\n")
    tokens.chmod(0o600)
    audit = tmp_path / "audit.jsonl"
    (tmp_path / "ROOT").mkdir()
    (tmp_path / "ROOT" / "a.txt").write_bytes(b"1")
    (tmp_path / "ROOT" / ".env").write_bytes(b"SECRET=1")
    async with serving(tmp_path, None, audit_log=audit) as server:
        async with client(server, token="tok-alice") as ops:
            assert await ops.read_file(f"{ops.root}/a.txt") == b"1"
            with pytest.raises(PolicyDenied):
                await ops.read_file(f"{ops.root}/.env")
        with pytest.raises(Unauthenticated):
            async with client(server, token="tok-mallory"):
                pass
    records = list(read_records([audit]))
    reads = [r for r in records if r.get("op") == "read_file"]
    assert [(r["principal"], r["transport"], r["decision"]) for r in reads] == [
        ("alice", "grpc", "allow"),
        ("alice", "grpc", "deny"),
    ]
    refusals = [r for r in records if r.get("code") == "unauthenticated"]
    assert refusals and refusals[0]["principal"] is None and refusals[0]["transport"] == "grpc"
    assert "tok-mallory" not in audit.read_text()
