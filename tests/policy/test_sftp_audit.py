"""SFTP refusals are audited on the file the client named, once."""

from __future__ import annotations

from pathlib import Path

import asyncssh
import pytest

from broker import Broker
from operations import Backend, GuardedBackend, Policy
from tests.policy._fake import ListAudit
from tests.ssh._harness import exists_in, serve_over_ssh, write_in

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("name", ["up.txt", "old.txt"])
async def test_a_refused_put_is_audited_on_its_file(tmp_path: Path, name: str) -> None:
    """It used to be ``access deny <root>``: the upload checked its parent directory."""
    root = tmp_path / "ROOT"
    root.mkdir()
    write_in(str(root), "old.txt", b"old")
    audit = ListAudit()

    def guard(core: Backend, principal: str, peer: str | None) -> Backend:
        return GuardedBackend(core, Policy(read_only=True), audit=audit, close_inner=False)

    async with (
        Broker(str(root)) as broker,
        serve_over_ssh(broker, tmp_path / "keys", guard=guard) as setup,
        setup.raw() as conn,
        conn.start_sftp_client() as sftp,
    ):
        with pytest.raises(asyncssh.SFTPPermissionDenied, match="read_only"):
            async with sftp.open(name, "wb") as remote:
                await remote.write(b"new", 0)
    denies = [e for e in audit.events if e["decision"] == "deny"]
    assert [(e["op"], e["path"], e["resolved"]) for e in denies] == [
        ("write_file", f"{root}/{name}", name)
    ]
    assert (root / "old.txt").read_bytes() == b"old"
    assert exists_in(str(root), "up.txt") is False
