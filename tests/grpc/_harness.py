"""An in-process broker on 127.0.0.1 port 0 with a token, and clients for it."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agent_side import connect
from agent_side._remote.grpc import GrpcBackend
from broker import BrokerConfig
from broker._frontends._service import METHODS
from broker._frontends.grpc import BrokerServicer
from broker._serve import BrokerServer
from operations import Backend


@asynccontextmanager
async def serving(
    tmp_path: Path, backend: Backend | None, **config: object
) -> AsyncIterator[BrokerServer]:
    """A started server over ``backend`` (``None``: the broker core over ``tmp_path/ROOT``)."""
    root = tmp_path / "ROOT"
    root.mkdir(exist_ok=True)
    settings: dict[str, object] = {
        "root": root,
        "grpc": ["127.0.0.1:0"],
        "token_file": tmp_path / "tokens",
        "shutdown_grace": 1.0,
    }
    settings.update(config)
    server = BrokerServer(BrokerConfig.model_validate(settings), backend)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def token_of(server: BrokerServer) -> str:
    assert server.token_file is not None
    line = next(
        ln for ln in server.token_file.read_text().splitlines() if ln and not ln.startswith("#")
    )
    return line.split()[0]


def client(server: BrokerServer, **options: object) -> GrpcBackend:
    options.setdefault("token", token_of(server))
    backend = connect(f"grpc://{server.addresses[0]}", **options)
    assert isinstance(backend, GrpcBackend)
    return backend


def count_calls(monkeypatch: pytest.MonkeyPatch, *methods: str) -> Counter[str]:
    """How often each of ``methods`` (answering with one reply: unary or client-streaming)
    reaches the broker, as an RPC of its own or on a ``Frames`` stream, counted from now on (for
    servers started after this call: the servicer's methods are bound at start)."""
    counts: Counter[str] = Counter()
    for name in methods:
        served = getattr(BrokerServicer, name)

        async def counted(
            self: BrokerServicer, *args: Any, _served: Any = served, _name: str = name
        ) -> Any:
            counts[_name] += 1
            return await _served(self, *args)

        monkeypatch.setattr(BrokerServicer, name, counted)
        method = METHODS[name]

        async def framed(*args: Any, _handler: Any = method.handler, _name: str = name) -> Any:
            counts[_name] += 1
            return await _handler(*args)

        monkeypatch.setitem(METHODS, name, dataclasses.replace(method, handler=framed))
    return counts
