"""The MCP Inspector's CLI (``@modelcontextprotocol/inspector --cli``, from the npm registry)
lists the tools of ``opsbroker mcp --root`` and calls each one; every result is the bytes
``execute_tool_calls`` gives on the same embedded broker.

Runs where ``npx`` exists (``.ci/run`` installs Node and npm from Debian when missing); the
first run fetches the package by name into npm's cache.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from agent_side._mcp import embedded_broker
from agent_side.tools import ALL_TOOL_NAMES, create_all_tools
from tests.cli._run import REPO, cli_env

from ._client import direct_call
from ._workspace import build

INSPECTOR = "@modelcontextprotocol/inspector@0.15.0"
NPX_TIMEOUT_S = 300  # the first run downloads the Inspector

pytestmark = pytest.mark.skipif(
    shutil.which("npx") is None,
    reason="the MCP Inspector needs node and npx (.ci/run installs them)",
)

# (tool, arguments as the Inspector's KEY=VALUE flags, the same arguments as JSON)
CALLS: list[tuple[str, list[str], dict[str, Any]]] = [
    ("read", ["path=a.txt", "limit=1"], {"path": "a.txt", "limit": 1}),
    ("read", ["path=../decoy/secret"], {"path": "../decoy/secret"}),
    ("write", ["path=n.txt", "content=new"], {"path": "n.txt", "content": "new"}),
    (
        "edit",
        ["path=a.txt", 'edits=[{"oldText":"world","newText":"there"}]'],
        {"path": "a.txt", "edits": [{"oldText": "world", "newText": "there"}]},
    ),
    ("ls", ["path=dir"], {"path": "dir"}),
    ("find", ["pattern=*.py"], {"pattern": "*.py"}),
    ("grep", ["pattern=hello"], {"pattern": "hello"}),
    ("bash", ["command=echo hi"], {"command": "echo hi"}),
    ("powershell", ["command=Write-Output hi"], {"command": "Write-Output hi"}),
]


def inspector(root: Path, *args: str) -> Any:
    command = [
        "npx", "-y", INSPECTOR, "--cli",
        sys.executable, "-m", "opsbroker", "mcp", "--root", str(root),
        *args,
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, env=cli_env(), cwd=REPO, timeout=NPX_TIMEOUT_S
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_inspector_lists_the_tools(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    build(root, tmp_path / "decoy")
    listed = await anyio.to_thread.run_sync(inspector, root, "--method", "tools/list")
    assert [tool["name"] for tool in listed["tools"]] == list(ALL_TOOL_NAMES)
    for tool in listed["tools"]:
        assert tool["annotations"]["openWorldHint"] is False


@pytest.mark.parametrize("tool,flags,arguments", CALLS, ids=[f"{c[0]}-{c[1][0]}" for c in CALLS])
async def test_inspector_calls_each_tool(
    tool: str, flags: list[str], arguments: dict[str, Any], tmp_path: Path
) -> None:
    root, decoy = tmp_path / "ws", tmp_path / "decoy"
    build(root, decoy)
    async with embedded_broker(root) as backend:
        expected = await direct_call(
            create_all_tools(cwd=backend.root, operations=backend), tool, arguments
        )
    build(root, decoy)
    result = await anyio.to_thread.run_sync(
        inspector, root, "--method", "tools/call", "--tool-name", tool, "--tool-arg", *flags
    )
    got = json.dumps({"content": result["content"], "isError": result["isError"]}, sort_keys=True)
    assert got.encode() == expected
