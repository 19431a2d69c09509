"""The gRPC backend: the broker core behind an in-process gRPC server on 127.0.0.1, port 0,
reached by ``agent_side.connect("grpc://...", token=...)``.

With ``OPSBROKER_CONFORMANCE_SERVE=1`` a second variant, ``grpc-serve``, runs every test against
its own ``opsbroker serve`` process (slow: one broker start per test, so it is opt-in).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

from agent_side import connect
from broker import Broker, BrokerConfig, BrokerServer
from operations import ProcessPolicy
from tests.conformance._workspace import DiskWorkspace


def write_token_file(path: Path) -> str:
    """A tokens file (mode 0600) with one fresh token; returns the token."""
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(f"{token} conformance\n")
    return token


@contextlib.asynccontextmanager
async def open_grpc(
    tmp_path: Path, *, process_policy: ProcessPolicy | None = None
) -> AsyncIterator[DiskWorkspace]:
    root, outside = DiskWorkspace.create_dirs(tmp_path)
    token = write_token_file(tmp_path / "tokens")
    config = BrokerConfig(
        root=Path(root),
        grpc=["127.0.0.1:0"],
        token_file=tmp_path / "tokens",
        shutdown_grace=1.0,
    )
    # The bare core, as the local variants use it (policy tests wrap the backend themselves).
    async with (
        Broker(root, process_policy=process_policy) as core,
        BrokerServer(config, core) as server,
        connect(f"grpc://{server.addresses[0]}", token=token) as ops,
    ):
        yield DiskWorkspace(ops, root, outside)


@contextlib.asynccontextmanager
async def open_serve_process(
    tmp_path: Path, *, process_policy: ProcessPolicy | None = None
) -> AsyncIterator[DiskWorkspace]:
    from tests.grpc._serve_process import serve_process

    root, outside = DiskWorkspace.create_dirs(tmp_path)
    token = write_token_file(tmp_path / "tokens")
    extra = ["--quiet"]
    if process_policy is not None:
        fields = process_policy.model_dump(exclude_none=True)
        lines = [f"{name} = {value!r}" for name, value in fields.items()]
        (tmp_path / "policy.toml").write_text("[process]\n" + "\n".join(lines) + "\n")
        extra += ["--policy", str(tmp_path / "policy.toml")]
    async with (
        serve_process(Path(root), tmp_path / "tokens", *extra) as served,
        connect(f"grpc://{served.address}", token=token) as ops,
    ):
        yield DiskWorkspace(ops, root, outside)


VARIANTS = {"grpc": open_grpc}
if os.environ.get("OPSBROKER_CONFORMANCE_SERVE"):
    VARIANTS["grpc-serve"] = open_serve_process
