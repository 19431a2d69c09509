"""Capabilities tell the truth on every transport.

A served broker's answer over gRPC and over SSH is the broker's own view (the core behind the
front-ends, with the limits its policy adds), and that view agrees with what the process manager,
the search engine and the policy really use. Every backend of the suite answers in one shape.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from opsbroker.v1.codec import CHUNK_BYTES, LIMIT_KEYS

from agent_side._remote.grpc import GrpcBackend
from agent_side._remote.ssh import SSHBackend
from broker import Broker, _rg
from broker._landlock import ACCESS_FS_READ_FILE, Rule, Ruleset, SandboxUnavailable
from broker._serve import BrokerServer
from operations import InMemoryOperations, ProcessPolicy, Unavailable
from tests.conformance._workspace import Workspace
from tests.grpc._harness import client, serving
from tests.ssh._harness import client_setup, make_keys, ssh_port

pytestmark = pytest.mark.anyio

POLICY = """
max_read_bytes = 1048576
max_write_bytes = 2097152

[exec]
default_timeout = 30
max_timeout = 60
max_output_bytes = 65536
pids_max = 512
memory_max = 268435456

[process]
max_per_principal = 3
max_total = 5
ring_bytes = 65536
max_lifetime = 600

[sandbox]
mode = "auto"
"""

POLICY_LIMITS = {
    "max_read_bytes": 1048576,
    "max_write_bytes": 2097152,
    "default_timeout": 30.0,
    "max_timeout": 60.0,
    "max_output_bytes": 65536,
}
"""The limits the policy above adds to the core's: the guard enforces them, not the core."""

PROCESS_LIMITS = {
    "max_processes_per_principal": "max_per_principal",
    "max_processes": "max_total",
    "ring_bytes": "ring_bytes",
    "max_process_lifetime": "max_lifetime",
}
"""The process limits a capabilities dict reports, and the ``[process]`` keys they come from."""

KEYS = {
    "resolver",
    "openat2_available",
    "search",
    "tracking",
    "cgroup_kill",
    "command_sandbox",
    "landlock_abi",
    "powershell",
    "limits",
}


@asynccontextmanager
async def served(tmp_path: Path) -> AsyncIterator[tuple[BrokerServer, GrpcBackend, SSHBackend]]:
    """``opsbroker serve`` in process under :data:`POLICY`, with a gRPC and an SSH client."""
    client_key, authorized = make_keys(tmp_path / "keys")
    host_key = tmp_path / "keys" / "host_ed25519"
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    async with serving(
        tmp_path,
        None,
        policy=policy,
        ssh=["127.0.0.1:0"],
        ssh_authorized_keys=authorized,
        ssh_host_key=host_key,
    ) as server:
        setup = client_setup(ssh_port(server), client_key, host_key, tmp_path / "known_hosts")
        ssh = setup.backend()
        async with client(server) as grpc, ssh:
            yield server, grpc, ssh


def broker_view(server: BrokerServer) -> dict[str, Any]:
    """What the core behind the front-ends reports, with the policy's limits added."""
    core = server.backend
    assert isinstance(core, Broker)
    own = core.capabilities()
    limits = dict(own["limits"])  # type: ignore[call-overload]
    limits.update(POLICY_LIMITS, chunk_bytes=CHUNK_BYTES)
    return {**own, "limits": limits}


async def test_grpc_and_ssh_report_the_brokers_own_view(tmp_path: Path) -> None:
    async with served(tmp_path) as (server, grpc, ssh):
        want = broker_view(server)
        assert grpc.capabilities() == want
        assert ssh.capabilities() == want
        assert grpc.version == ssh.version != ""


async def test_the_brokers_view_is_what_it_runs_on(tmp_path: Path) -> None:
    async with served(tmp_path) as (server, grpc, _):
        core = server.backend
        assert isinstance(core, Broker) and server.enforcement is not None
        manager = core._process_manager("exec").capabilities()
        caps = grpc.capabilities()
        limits = caps["limits"]
        assert caps["tracking"] == ("cgroup" if manager.cgroup_kill else "proc")
        assert caps["cgroup_kill"] is manager.cgroup_kill
        # A cgroup limit is reported only where the host enforces it.
        assert limits["pids_max"] == (512 if "pids" in manager.limits else None)
        assert limits["memory_max"] == (268435456 if "memory" in manager.limits else None)
        assert caps["search"] == ("rg" if _rg.usable() else "python")
        assert caps["landlock_abi"] == _rg.landlock_abi()
        assert caps["command_sandbox"] is server.enforcement.sandbox_active is manager.sandbox
        assert caps["resolver"] == core.resolver.strategy
        assert {k: limits[k] for k in POLICY_LIMITS} == POLICY_LIMITS
        process = server.enforcement.policy.process
        reported = [limits[k] for k in PROCESS_LIMITS]
        assert reported == [3, 5, 65536, 600.0]
        assert reported == [getattr(process, field) for field in PROCESS_LIMITS.values()]


async def test_every_backend_answers_in_one_shape(ws: Workspace) -> None:
    describe = getattr(ws.ops, "capabilities", None)
    assert callable(describe), f"{type(ws.ops).__name__} has no capabilities()"
    caps = describe()
    assert set(caps) == KEYS
    assert set(caps["limits"]) == set(LIMIT_KEYS)
    assert caps["resolver"] in ("openat2", "walk", "memory")
    assert caps["search"] in ("rg", "python", "memory")
    assert caps["tracking"] in ("cgroup", "proc", "memory")
    assert caps["cgroup_kill"] is (caps["tracking"] == "cgroup")
    for key, value in caps["limits"].items():
        assert value is None or (isinstance(value, int | float) and value > 0), (key, value)


async def test_the_memory_backend_reports_what_it_models() -> None:
    policy = ProcessPolicy(max_per_principal=2, ring_bytes=4096)
    async with InMemoryOperations(
        max_read_bytes=10, max_write_bytes=20, max_output_bytes=30, process_policy=policy
    ) as ops:
        caps = ops.capabilities()
        assert (caps["resolver"], caps["search"], caps["tracking"]) == ("memory",) * 3
        assert not caps["cgroup_kill"] and not caps["command_sandbox"]
        limits = caps["limits"]
        assert (limits["max_read_bytes"], limits["max_write_bytes"]) == (10, 20)
        assert limits["max_output_bytes"] == 30
        assert (limits["max_processes_per_principal"], limits["ring_bytes"]) == (2, 4096)
        assert limits["pids_max"] is None and limits["max_timeout"] is None


async def test_the_memory_backend_served_over_grpc_says_the_same(tmp_path: Path) -> None:
    ops = InMemoryOperations(root=str(tmp_path / "ROOT"), max_output_bytes=30)
    async with ops, serving(tmp_path, ops) as server, client(server) as grpc:
        want = ops.capabilities()
        want["limits"] = {**want["limits"], "chunk_bytes": CHUNK_BYTES}  # type: ignore[dict-item]
        assert grpc.capabilities() == want


async def test_asking_does_not_pin_the_command_sandbox(tmp_path: Path) -> None:
    """A core asked for its capabilities can still be handed a sandbox (as ``serve`` does)."""
    if _rg.landlock_abi() == 0:
        with pytest.raises(SandboxUnavailable):
            Ruleset([Rule(str(tmp_path), ACCESS_FS_READ_FILE)])
        return
    ruleset = Ruleset([Rule(str(tmp_path), ACCESS_FS_READ_FILE)])
    try:
        async with Broker(str(tmp_path)) as broker:
            assert broker.capabilities()["command_sandbox"] is False
            broker.use_sandbox(ruleset)
            assert broker.capabilities()["command_sandbox"] is True
            assert broker._process_manager("exec").capabilities().sandbox
    finally:
        ruleset.close()


async def test_capabilities_before_connecting_are_unavailable(tmp_path: Path) -> None:
    with pytest.raises(Unavailable, match="not connected"):
        SSHBackend("127.0.0.1", 1).capabilities()
    with pytest.raises(Unavailable, match="not connected"):
        GrpcBackend("127.0.0.1:1").capabilities()
