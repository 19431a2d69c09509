"""``opsbroker serve`` as its own process: it says where it listens and how callers authenticate,
serves the workspace, and stops cleanly on SIGTERM, killing what it runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agent_side import connect
from operations import ExecResult, KillReason
from tests.broker._procscan import marked_env, new_marker, survivors

from ._serve_process import serve_process


def _token(path: Path) -> str:
    return next(ln for ln in path.read_text().splitlines() if not ln.startswith("#")).split()[0]


async def test_serve_process_serves_and_stops_cleanly(tmp_path: Path) -> None:
    root = tmp_path / "ROOT"
    root.mkdir()
    (root / "hello.txt").write_bytes(b"hi\n")
    tokens = tmp_path / "state" / "tokens"
    marker = new_marker()
    async with serve_process(root, tokens) as served:
        assert any(line.startswith("opsbroker: principals: TCP:") for line in served.lines)
        assert f"opsbroker: token file: {tokens}" in served.lines
        async with connect(f"grpc://{served.address}", token=_token(tokens)) as ops:
            assert ops.root == str(root)
            caps = ops.capabilities()
            assert caps["resolver"] in ("openat2", "walk") and ops.version
            assert caps["limits"]["chunk_bytes"] == 256 * 1024
            assert await ops.read_file(f"{root}/hello.txt") == b"hi\n"
            out: list[bytes] = []
            result = await ops.exec("echo $((6*7))", ops.root, on_data=out.append)
            assert (result, b"".join(out)) == (ExecResult(0), b"42\n")
            running = asyncio.create_task(
                ops.exec(
                    "sleep 1000 & sleep 1000",
                    ops.root,
                    on_data=lambda _: None,
                    env=marked_env(marker),
                )
            )
            for _ in range(500):
                if len(survivors(marker)) >= 2:
                    break
                await asyncio.sleep(0.01)
            served.stop()  # SIGTERM while a command runs
            assert await running == ExecResult(None, KillReason.SHUTDOWN)
    assert served.process.returncode == 0
    assert served.lines[-1] == "opsbroker: stopped"
    assert survivors(marker) == []
