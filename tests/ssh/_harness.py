"""A broker served over SSH on loopback, with keys generated in a temporary directory."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

from agent_side._remote.ssh import SSHBackend
from broker import Broker
from broker._frontends.ssh import SSHFrontend, SSHServerOptions, start_ssh_server
from operations import Backend


@dataclass
class SSHSetup:
    """Paths of the keys and files a client needs, and the running front-end."""

    frontend: SSHFrontend | None
    """``None`` for a front-end started elsewhere (:func:`client_setup`)."""
    client_key: Path
    authorized_keys: Path
    host_key: Path
    known_hosts: Path
    port: int

    def raw(self, **options: Any) -> Any:
        """An ``asyncssh.connect`` to the front-end (await it, or use it with ``async with``)."""
        return asyncssh.connect(
            "127.0.0.1",
            self.port,
            username="agent",
            client_keys=[str(self.client_key)],
            known_hosts=str(self.known_hosts),
            **options,
        )

    def backend(self, **options: object) -> SSHBackend:
        return SSHBackend(
            "127.0.0.1",
            self.port,
            username="agent",
            client_keys=[str(self.client_key)],
            known_hosts=str(self.known_hosts),
            **options,
        )


def make_keys(keys: Path) -> tuple[Path, Path]:
    """A client key pair (OpenSSH format) and an authorized_keys file holding its public half."""
    keys.mkdir(parents=True, exist_ok=True)
    client = asyncssh.generate_private_key("ssh-ed25519", comment="agent@test")
    client_key = keys / "client_ed25519"
    client.write_private_key(str(client_key))
    client_key.chmod(0o600)
    client.write_public_key(str(client_key) + ".pub")
    authorized = keys / "authorized_keys"
    authorized.write_bytes(client.export_public_key())
    return client_key, authorized


def client_setup(port: int, client_key: Path, host_key: Path, known_hosts: Path) -> SSHSetup:
    """The client side of a broker serving SSH on ``127.0.0.1:port`` with ``host_key`` that was
    started elsewhere (a ``BrokerServer``, ``opsbroker serve``): ``known_hosts`` is written."""
    public = asyncssh.read_private_key(host_key).export_public_key().decode().strip()
    known_hosts.write_text(f"[127.0.0.1]:{port} {public}\n")
    return SSHSetup(None, client_key, Path(), host_key, known_hosts, port)


def ssh_port(server: Any) -> int:
    """The port of a ``BrokerServer``'s first SSH listener."""
    return int(server.ssh_addresses[0].rsplit(":", 1)[1])


@contextlib.asynccontextmanager
async def serve_over_ssh(
    backend: Backend, keys: Path, **options: object
) -> AsyncIterator[SSHSetup]:
    client_key, authorized = make_keys(keys)
    host_key = keys / "host_ed25519"
    guard = options.pop("guard", None)
    frontend = await start_ssh_server(
        backend,
        SSHServerOptions(authorized_keys=authorized, host_key=host_key, **options),  # type: ignore[arg-type]
        guard=guard,  # type: ignore[arg-type]
    )
    try:
        known_hosts = keys / "known_hosts"
        public = frontend.host_key.export_public_key().decode().strip()
        known_hosts.write_text(f"[127.0.0.1]:{frontend.port} {public}\n")
        yield SSHSetup(frontend, client_key, authorized, host_key, known_hosts, frontend.port)
    finally:
        await frontend.aclose()


@contextlib.asynccontextmanager
async def broker_over_ssh(tmp_path: Path, root: str) -> AsyncIterator[tuple[SSHSetup, SSHBackend]]:
    """The broker core on ``root``, served over SSH, and a connected SSH client backend."""
    async with (
        Broker(root) as broker,
        serve_over_ssh(broker, tmp_path / "keys") as setup,
        setup.backend() as client,
    ):
        yield setup, client


def read_in(root: str, rel: str) -> bytes:
    """The bytes of ``rel`` under the workspace ``root``, read directly (not through the broker)."""
    return Path(root, rel).read_bytes()


def write_in(root: str, rel: str, data: bytes) -> None:
    Path(root, rel).write_bytes(data)


def exists_in(root: str, rel: str) -> bool:
    return os.path.lexists(os.path.join(root, rel))
