"""``opsbroker serve --record FILE``: a served session is recorded under the policy, and no secret
(a token, a ``deny_read`` file's content) reaches the cassette."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from broker._cli_serve import _config, add_parser
from operations import InMemoryOperations, PolicyDenied
from tests.grpc._harness import client, serving, token_of

SECRET = "hunter2-very-secret-value"


async def test_a_served_session_is_recorded_and_replays(tmp_path: Path) -> None:
    root = tmp_path / "ROOT"
    root.mkdir()
    (root / ".env").write_text(f"API_KEY={SECRET}\n")
    (root / "a.txt").write_text("alpha\n")
    cassette = tmp_path / "served.cassette"
    async with serving(tmp_path, None, record=cassette) as server:
        token = token_of(server)
        async with client(server) as ops:
            assert await ops.read_file(f"{ops.root}/a.txt") == b"alpha\n"
            with pytest.raises(PolicyDenied) as refused:
                await ops.read_file(f"{ops.root}/.env")
            out: list[bytes] = []
            await ops.exec("echo hi", ops.root, on_data=out.append)
            found = await ops.glob("*", ops.root)
    text = cassette.read_text()
    assert SECRET not in text and token not in text
    assert '"denied": "deny_read: **/.env"' in text
    assert '"code": "policy_denied"' in text  # the refusal is recorded, not the content
    async with InMemoryOperations.from_cassette(cassette) as replay:
        assert await replay.read_file(f"{replay.root}/a.txt") == b"alpha\n"
        with pytest.raises(PolicyDenied) as again:
            await replay.read_file(f"{replay.root}/.env")
        assert str(again.value) == str(refused.value)
        assert await replay.glob("*", replay.root) == found  # .env hidden, as served
        replayed: list[bytes] = []
        await replay.exec("echo hi", replay.root, on_data=replayed.append)
    assert replayed == out == [b"hi\n"]


def test_serve_takes_record(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["serve", "--root", str(tmp_path), "--record", "s.cassette"])
    assert _config(args).record == Path("s.cassette")
