"""``opsbroker serve --mcp-http``: one broker, one core and one audit log behind gRPC and MCP at
once, and a broker stopped while an MCP call runs leaves zero processes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from pathlib import Path

import anyio
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from broker import verify_files
from tests.broker._procscan import MARK_VAR, kill_pids, new_marker, survivors
from tests.cli._run import opsbroker

from ._client import CALL_TIMEOUT_S
from ._http import ALICE, http_server, http_session
from .test_cancel import GONE_WITHIN_S, _poll


async def test_grpc_and_mcp_serve_one_core_and_one_audit_log(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    audit = tmp_path / "audit.jsonl"
    with http_server(tmp_path, "--root", str(root), "--audit-log", str(audit), kind="serve") as url:
        announced = (tmp_path / "serve-http.out").read_text()
        grpc_address = re.search(r"on grpc (\S+)", announced)
        assert grpc_address is not None, announced
        tokens = str(tmp_path / "serve-tokens")
        written = opsbroker(
            "call",
            f"grpc://{grpc_address.group(1)}",
            "--token-file",
            tokens,
            "write",
            json.dumps({"path": "from-grpc.txt", "content": "written over gRPC\n"}),
        )
        assert written.returncode == 0, written
        async with http_session(url, ALICE) as session:
            with anyio.fail_after(CALL_TIMEOUT_S):
                result = await session.call_tool("read", {"path": "from-grpc.txt"})
                refused = await session.call_tool("read", {"path": "../outside.txt"})
        assert result.content[0].text == "written over gRPC\n"  # type: ignore[union-attr]
        assert refused.is_error
    ops = [json.loads(line) for line in audit.read_text().splitlines()]
    by_transport = {(op["transport"], op["op"], op["decision"]) for op in ops if "op" in op}
    assert ("grpc", "write_file", "allow") in by_transport, by_transport
    assert ("mcp", "read_file", "allow") in by_transport, by_transport
    assert ("mcp", "access", "deny") in by_transport, by_transport
    assert {op["principal"] for op in ops if op.get("transport") == "mcp"} == {"alice"}
    assert verify_files([audit]).ok


async def test_broker_stopped_mid_call_leaves_no_process(tmp_path: Path) -> None:
    marker = new_marker()
    command = f"export {MARK_VAR}={marker}; setsid sleep 300 & sleep 300"
    try:
        with http_server(tmp_path, "--root", str(tmp_path), kind="serve") as url:
            broker = int((tmp_path / "serve-http.pid").read_text())
            ended: list[str] = []

            async def call(session: ClientSession) -> None:
                with contextlib.suppress(MCPError):  # the broker ends the stream as it stops
                    await session.call_tool("bash", {"command": command})
                ended.append("call")

            async with http_session(url) as session, anyio.create_task_group() as group:
                group.start_soon(call, session)
                with anyio.fail_after(CALL_TIMEOUT_S):
                    assert await _poll(lambda: len(survivors(marker)) >= 2, CALL_TIMEOUT_S)
                os.kill(broker, signal.SIGTERM)  # the call is still running: the broker stops
                assert await _poll(lambda: not survivors(marker), GONE_WITHIN_S), survivors(marker)
                with anyio.fail_after(CALL_TIMEOUT_S):
                    assert await _poll(lambda: ended == ["call"], CALL_TIMEOUT_S)
    finally:
        kill_pids(survivors(marker))
