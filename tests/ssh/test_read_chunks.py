"""ReadFile's pieces over SSH are framed from the bytes read (``send.chunk``), never built as
``Chunk`` messages first: the same bytes arrive, in the same pieces, as from a ``send`` that takes
messages only (the gRPC front-end's)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import Message
from opsbroker.v1 import broker_pb2 as pb

from broker import Broker
from broker._frontends import _frames
from broker._frontends._service import Service
from broker._frontends.ssh import READ_CHUNK_BYTES
from operations import Backend

from ._harness import broker_over_ssh

pytestmark = pytest.mark.anyio

SIZES = [0, 1, READ_CHUNK_BYTES - 1, READ_CHUNK_BYTES, READ_CHUNK_BYTES + 1, 3 * READ_CHUNK_BYTES]


class _Send:
    """A ``send`` that takes messages only."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def __call__(self, message: Message) -> None:
        self.messages.append(message)


class _ChunkSend(_Send):
    """A ``send`` that also takes a file's pieces as raw bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.pieces: list[bytes] = []

    async def chunk(self, data: bytes) -> None:
        self.pieces.append(data)


class _Call:
    def __init__(self, ops: Backend, send: _Send) -> None:
        self.ops, self.principal, self.subject, self.send = ops, "tester", None, send


@pytest.mark.parametrize("size", SIZES)
async def test_raw_pieces_are_the_messages_pieces(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    (tmp_path / "f").write_bytes(data)
    async with Broker(str(tmp_path)) as core:
        service = Service(
            version="test", root=core.root, info={}, read_chunk_bytes=READ_CHUNK_BYTES
        )
        request = pb.PathRequest(path=str(tmp_path / "f"))
        plain, raw = _Send(), _ChunkSend()
        await service.ReadFile(request, _Call(core, plain))
        await service.ReadFile(request, _Call(core, raw))
    assert raw.messages == []
    assert [m.data for m in plain.messages] == raw.pieces
    assert b"".join(raw.pieces) == data


async def test_a_read_over_ssh_takes_the_raw_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    framed: list[int] = []
    chunk = _frames._FrameSend.chunk

    def counted(self: Any, data: bytes) -> Any:
        framed.append(len(data))
        return chunk(self, data)

    monkeypatch.setattr(_frames._FrameSend, "chunk", counted)
    root = tmp_path / "root"
    root.mkdir()
    async with broker_over_ssh(tmp_path, str(root)) as (_, ops):
        for size in SIZES:
            data = os.urandom(size)
            (root / f"f{size}").write_bytes(data)
            framed.clear()
            assert await ops.read_file(f"{ops.root}/f{size}") == data
            assert sum(framed) == size and (bool(framed) or not size), (size, framed)
            assert all(n <= READ_CHUNK_BYTES for n in framed)
