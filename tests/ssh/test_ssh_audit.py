"""SSH refusals reach the audit log like gRPC ones: who tried, from where, with which keys."""

from __future__ import annotations

from pathlib import Path

import asyncssh
import pytest

from agent_side._remote.ssh import SSHBackend
from broker._audit import read_records
from operations import Unauthenticated
from tests.grpc._harness import serving
from tests.ssh._harness import client_setup, make_keys, ssh_port

pytestmark = pytest.mark.anyio


async def test_a_refused_key_is_audited_and_an_accepted_one_is_not(tmp_path: Path) -> None:
    client_key, authorized = make_keys(tmp_path / "keys")
    stranger_key, _ = make_keys(tmp_path / "stranger")
    host_key = tmp_path / "keys" / "host_ed25519"
    audit = tmp_path / "audit.jsonl"
    async with serving(
        tmp_path,
        None,
        grpc=[],
        ssh=["127.0.0.1:0"],
        ssh_authorized_keys=authorized,
        ssh_host_key=host_key,
        audit_log=audit,
    ) as server:
        setup = client_setup(ssh_port(server), client_key, host_key, tmp_path / "known_hosts")

        def backend(key: Path, user: str) -> SSHBackend:
            return SSHBackend(
                "127.0.0.1",
                setup.port,
                username=user,
                client_keys=[str(key)],
                known_hosts=str(setup.known_hosts),
            )

        with pytest.raises(Unauthenticated):
            async with backend(stranger_key, "mallory"):
                pass
        async with backend(client_key, "agent") as ops:
            assert await ops.exists(ops.root)
    stranger = asyncssh.read_private_key(stranger_key).get_fingerprint()
    refusals = [r for r in read_records([audit]) if r.get("decision") == "deny"]
    assert len(refusals) == 1, refusals
    refusal = refusals[0]
    assert (refusal["op"], refusal["transport"], refusal["code"]) == (
        "authenticate",
        "ssh",
        "unauthenticated",
    )
    assert refusal["principal"] is None
    assert refusal["peer"].startswith("127.0.0.1:")
    assert "'mallory'" in refusal["reason"] and stranger in refusal["reason"]
    assert "PRIVATE" not in audit.read_text()
