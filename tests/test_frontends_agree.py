"""One table of hostile requests, sent as raw wire messages through the gRPC front-end and the SSH
subsystem of one broker: every answer (the error code, operation, path and reason of its
``ErrorDetail``, or success) is the same on both, because both are translations of one service.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncssh
import grpc
import grpc.aio
import pytest
from opsbroker.v1 import broker_pb2 as pb
from opsbroker.v1.codec import CHUNK_BYTES, ERROR_METADATA_KEY
from opsbroker.v1.sshframe import (
    NEED_DATA,
    End,
    EndOfInput,
    FrameConnection,
    Message,
    Request,
    Role,
)

from broker._frontends._service import METHODS
from tests.grpc._harness import serving, token_of
from tests.ssh._harness import client_setup, make_keys, ssh_port

pytestmark = pytest.mark.anyio

SERVICE = "/opsbroker.v1.Broker/"
CALL_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Case:
    """A method and the raw messages of its request (one, or a client stream)."""

    name: str
    method: str
    messages: tuple[bytes, ...]


def _req(message: object) -> bytes:
    assert hasattr(message, "SerializeToString")
    data: bytes = message.SerializeToString()
    return data


def cases(root: str) -> list[Case]:
    run, small = pb.ExecRequest, pb.WriteSmallFileRequest
    return [
        Case("write: no path", "WriteFile", (_req(pb.WriteFileRequest(data=b"x")),)),
        Case("write: no message", "WriteFile", ()),
        Case(
            "write: size < 0", "WriteFile", (_req(pb.WriteFileRequest(path=f"{root}/a", size=-1)),)
        ),
        Case(
            "write: stream short of its size",
            "WriteFile",
            (_req(pb.WriteFileRequest(path=f"{root}/a", size=5, data=b"abc")),),
        ),
        Case(
            "write: stream past its size",
            "WriteFile",
            (
                _req(pb.WriteFileRequest(path=f"{root}/a", size=2, data=b"ab")),
                _req(pb.WriteFileRequest(data=b"c")),
            ),
        ),
        Case("write: escape", "WriteFile", (_req(pb.WriteFileRequest(path=f"{root}/../x")),)),
        Case("write: undecodable", "WriteFile", (b"\xff\xff\xff",)),
        Case(
            "write small: one chunk",
            "WriteSmallFile",
            (_req(small(path=f"{root}/small", data=b"x" * CHUNK_BYTES, mode=0o640)),),
        ),
        Case(
            "write small: above one chunk",
            "WriteSmallFile",
            (_req(small(path=f"{root}/small", data=b"x" * (CHUNK_BYTES + 1))),),
        ),
        Case("write small: escape", "WriteSmallFile", (_req(small(path=f"{root}/../x")),)),
        Case("write small: denied", "WriteSmallFile", (_req(small(path=f"{root}/.env")),)),
        Case(
            "write small: bad mode", "WriteSmallFile", (_req(small(path=f"{root}/m", mode=8**4)),)
        ),
        Case("write small: undecodable", "WriteSmallFile", (b"\xff\xff\xff",)),
        Case("run: unknown shell", "Run", (_req(run(command="true", cwd=root, shell=7)),)),  # type: ignore[arg-type]
        Case("run: negative timeout", "Run", (_req(run(command="true", cwd=root, timeout=-1)),)),
        Case("run: zero timeout", "Run", (_req(run(command="true", cwd=root, timeout=0)),)),
        Case("run: nan timeout", "Run", (_req(run(command="true", cwd=root, timeout=math.nan)),)),
        Case(
            "run: timeout above the policy's maximum",
            "Run",
            (_req(run(command="true", cwd=root, timeout=1e4)),),
        ),
        Case(
            "run: timeout above any maximum",
            "Run",
            (_req(run(command="true", cwd=root, timeout=1e9)),),
        ),
        Case("run: cwd escapes", "Run", (_req(run(command="true", cwd="/")),)),
        Case("run: cwd missing", "Run", (_req(run(command="true", cwd=f"{root}/nope")),)),
        Case("run: exits 3", "Run", (_req(run(command="exit 3", cwd=root)),)),
        Case("abort: no id", "AbortRun", (_req(pb.AbortRunRequest()),)),
        Case("read: relative", "ReadFile", (_req(pb.PathRequest(path="a")),)),
        Case("read: escape", "ReadFile", (_req(pb.PathRequest(path=f"{root}/../../x")),)),
        Case("read: NUL", "ReadFile", (_req(pb.PathRequest(path=f"{root}/a\0b")),)),
        Case("read: denied", "ReadFile", (_req(pb.PathRequest(path=f"{root}/.env")),)),
        Case("read small: directory", "ReadSmallFile", (_req(pb.PathRequest(path=root)),)),
        Case("stat: undecodable", "Stat", (b"\xff\xff\xff",)),
        Case("stat: empty", "Stat", (_req(pb.PathRequest()),)),
        Case("glob: bad pattern", "Glob", (_req(pb.GlobRequest(pattern="[", cwd=root)),)),
        Case("search: bad regex", "Search", (_req(pb.SearchRequest(pattern="(", path=root)),)),
        Case(
            "rename: escape",
            "Rename",
            (_req(pb.RenameRequest(source=f"{root}/x", destination="/x")),),
        ),
        Case("remove: root", "Remove", (_req(pb.RemoveRequest(path=root)),)),
        Case("mkdir: denied", "Mkdir", (_req(pb.PathRequest(path=f"{root}/.git/hooks/x")),)),
    ]


Answer = tuple[str, str, str | None, str] | str
"""``(code, op, path, reason)`` of the ErrorDetail, or ``"ok"``."""


def _answer(detail: bytes | None) -> Answer:
    if not detail:
        return "ok"
    error = pb.ErrorDetail()
    error.ParseFromString(detail)
    return (error.code, error.op, error.path if error.HasField("path") else None, error.reason)


async def grpc_answer(channel: grpc.aio.Channel, token: str, case: Case) -> Answer:
    method = METHODS[case.method]
    path = SERVICE + case.method
    kwargs = {"metadata": (("authorization", f"Bearer {token}"),), "timeout": CALL_TIMEOUT_S}
    try:
        if method.client_streaming:
            call = channel.stream_unary(path)(**kwargs)
            for message in case.messages:
                await call.write(message)
            await call.done_writing()
            await call
        elif method.server_streaming:
            async for _ in channel.unary_stream(path)(case.messages[0], **kwargs):
                pass
        else:
            await channel.unary_unary(path)(case.messages[0], **kwargs)
    except grpc.aio.AioRpcError as exc:
        for key, value in exc.trailing_metadata() or ():
            if key == ERROR_METADATA_KEY:
                return _answer(value)
        return f"status {exc.code().name} without a detail: {exc.details()}"
    return "ok"


async def ssh_answer(conn: asyncssh.SSHClientConnection, case: Case) -> Answer:
    writer, reader, _ = await conn.open_session(subsystem="opsbroker", encoding=None)
    frames = FrameConnection(Role.CLIENT)
    first, *rest = case.messages or (b"",)
    data = frames.send(Request(case.method, first))
    for message in rest:
        data += frames.send(Message(message))
    writer.write(data + frames.send(EndOfInput()))
    async with asyncio.timeout(CALL_TIMEOUT_S):
        while True:
            frames.receive_data(await reader.read(65536))
            while (event := frames.next_event()) is not NEED_DATA:
                if isinstance(event, End):
                    writer.close()
                    return _answer(event.error)


@pytest.fixture
async def both(
    tmp_path: Path,
) -> AsyncIterator[tuple[grpc.aio.Channel, str, asyncssh.SSHClientConnection, str]]:
    client_key, authorized = make_keys(tmp_path / "keys")
    host_key = tmp_path / "keys" / "host_ed25519"
    async with serving(
        tmp_path,
        None,
        ssh=["127.0.0.1:0"],
        ssh_authorized_keys=authorized,
        ssh_host_key=host_key,
    ) as server:
        (tmp_path / "ROOT" / ".env").write_text("TOKEN=1\n")
        setup = client_setup(ssh_port(server), client_key, host_key, tmp_path / "known_hosts")
        async with (
            grpc.aio.insecure_channel(server.addresses[0]) as channel,
            setup.raw() as conn,
        ):
            yield channel, token_of(server), conn, str(tmp_path / "ROOT")


async def test_hostile_requests_get_the_same_answer_on_grpc_and_ssh(
    both: tuple[grpc.aio.Channel, str, asyncssh.SSHClientConnection, str],
) -> None:
    channel, token, conn, root = both
    table = cases(root)
    answers = {}
    for case in table:
        answers[case.name] = (await grpc_answer(channel, token, case), await ssh_answer(conn, case))
    differ = {name: pair for name, pair in answers.items() if pair[0] != pair[1]}
    assert not differ, differ
    codes = {name: a if isinstance(a, str) else a[0] for name, (a, _) in answers.items()}
    assert codes == WANT


WANT = {
    "write: no path": "invalid_argument",
    "write: no message": "invalid_argument",
    "write: size < 0": "invalid_argument",
    "write: stream short of its size": "invalid_argument",
    "write: stream past its size": "invalid_argument",
    "write: escape": "escapes_root",
    "write: undecodable": "invalid_argument",
    "write small: one chunk": "ok",
    "write small: above one chunk": "invalid_argument",
    "write small: escape": "escapes_root",
    "write small: denied": "policy_denied",
    "write small: bad mode": "invalid_argument",
    "write small: undecodable": "invalid_argument",
    "run: unknown shell": "invalid_argument",
    "run: negative timeout": "invalid_argument",
    "run: zero timeout": "invalid_argument",
    "run: nan timeout": "invalid_argument",
    "run: timeout above the policy's maximum": "policy_denied",
    "run: timeout above any maximum": "invalid_argument",
    "run: cwd escapes": "escapes_root",
    "run: cwd missing": "not_found",
    "run: exits 3": "ok",
    "abort: no id": "invalid_argument",
    "read: relative": "invalid_argument",
    "read: escape": "escapes_root",
    "read: NUL": "invalid_argument",
    "read: denied": "policy_denied",
    "read small: directory": "is_a_directory",
    "stat: undecodable": "invalid_argument",
    "stat: empty": "invalid_argument",
    "glob: bad pattern": "invalid_argument",
    "search: bad regex": "invalid_argument",
    "rename: escape": "escapes_root",
    "remove: root": "invalid_argument",
    "mkdir: denied": "policy_denied",
}
"""The error code each case must end with, on both transports ("ok": it runs)."""
