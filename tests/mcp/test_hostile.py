"""A hostile client on raw stdio: every line gets a defined JSON-RPC answer, and the server keeps
serving (the next valid call works)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_side._mcp._framing import MAX_LINE_BYTES
from tests.broker._procscan import kill_and_reap
from tests.cli._run import REPO, cli_env

ANSWER_TIMEOUT_S = 30.0

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "hostile", "version": "1"},
    },
}

# (name, line, expected error code, expected id)
HOSTILE = [
    ("not-json", "this is not json", -32700, None),
    ("truncated-json", '{"jsonrpc":"2.0","id":7,"method":"tools/list"', -32700, None),
    ("array", "[1, 2]", -32600, None),
    ("wrong-version", '{"jsonrpc":"1.0","id":8,"method":"tools/list"}', -32600, 8),
    ("params-not-object", '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":5}', -32600, 3),
    ("unknown-method", '{"jsonrpc":"2.0","id":2,"method":"no/such","params":{}}', -32601, 2),
    (
        "arguments-not-object",
        '{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"read","arguments":"x"}}',
        -32602,
        10,
    ),
    (
        "huge-params",
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 11,
                "method": "tools/call",
                "params": {
                    "name": "write",
                    "arguments": {"path": "h", "content": "x" * MAX_LINE_BYTES},
                },
            }
        ),
        -32600,
        None,
    ),
    ("deep-nesting", "[" * 100_000 + "]" * 100_000, -32700, None),
]


class RawClient:
    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "opsbroker", "mcp", "--root", str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=cli_env(),
            cwd=REPO,
        )
        self._buffer = b""

    def send(self, line: str | dict[str, object]) -> None:
        text = line if isinstance(line, str) else json.dumps(line)
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode() + b"\n")
        self.proc.stdin.flush()

    def answer(self) -> dict[str, object]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            assert left > 0, "no answer in time"
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                assert chunk, "the server closed stdout"
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        value: dict[str, object] = json.loads(line)
        return value


@pytest.fixture
def client(tmp_path: Path) -> Iterator[RawClient]:
    raw = RawClient(tmp_path)
    try:
        raw.send(INITIALIZE)
        assert "result" in raw.answer()
        raw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        yield raw
    finally:
        if raw.proc.stdin is not None:
            raw.proc.stdin.close()
        try:
            raw.proc.wait(15)
        finally:
            kill_and_reap(raw.proc)  # type: ignore[arg-type]


@pytest.mark.parametrize("name,line,code,request_id", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_line_gets_a_defined_error(
    name: str, line: str, code: int, request_id: int | None, client: RawClient, tmp_path: Path
) -> None:
    client.send(line)
    answer = client.answer()
    assert answer["jsonrpc"] == "2.0"
    assert answer["id"] == request_id
    error = answer["error"]
    assert isinstance(error, dict) and error["code"] == code, answer
    (tmp_path / "a.txt").write_text("still here\n")
    client.send(
        {
            "jsonrpc": "2.0",
            "id": 99,
            "method": "tools/call",
            "params": {"name": "read", "arguments": {"path": "a.txt"}},
        }
    )
    after = client.answer()
    assert after["id"] == 99
    assert after["result"] == {
        "content": [{"type": "text", "text": "still here\n"}],
        "isError": False,
    }
    assert not (tmp_path / "h").exists()
