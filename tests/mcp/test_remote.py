"""``opsbroker mcp grpc://...`` and ``ssh://...``: the tools run on a remote ``opsbroker serve``,
and every call of the table gives the bytes ``execute_tool_calls`` gives on the same remote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from agent_side import connect
from agent_side.tools import create_all_tools
from tests.cli._run import serving

from ._client import CALL_TIMEOUT_S, direct_call, mcp_bytes, mcp_session
from ._workspace import build, tree_hash
from .test_stdio_tools import CASES


def _remote(scheme: str, served: Any) -> tuple[list[str], str, dict[str, Any]]:
    """The ``opsbroker mcp`` arguments, and the URL and ``connect`` options of the same broker."""
    if scheme == "grpc":
        return (
            [served.url, "--token-file", str(served.token_file)],
            served.url,
            {"token": served.token},
        )
    key, known_hosts = served.ssh_options[1], served.ssh_options[3]
    options = {"client_keys": [key], "known_hosts": known_hosts}
    return [served.ssh_url, *served.ssh_options], served.ssh_url, options


@pytest.mark.parametrize("scheme", ["grpc", "ssh"])
async def test_remote_results_are_the_loops(scheme: str, tmp_path: Path) -> None:
    root, decoy, state = tmp_path / "ws", tmp_path / "decoy", tmp_path / "state"
    state.mkdir()
    build(root, decoy)
    before = tree_hash(decoy)
    with serving(root, state) as served:
        args, url, options = _remote(scheme, served)
        backend = connect(url, **options)
        await backend.__aenter__()
        try:
            tools = create_all_tools(cwd=backend.root, operations=backend)
            async with mcp_session(*args) as session:
                listed = [tool.name for tool in (await session.list_tools()).tools]
                assert listed == [tool.name for tool in tools]
                mismatches = []
                for case in CASES:
                    build(root, decoy)
                    with anyio.fail_after(CALL_TIMEOUT_S):
                        expected = await direct_call(tools, case.tool, case.arguments)
                    build(root, decoy)
                    with anyio.fail_after(CALL_TIMEOUT_S):
                        result = await session.call_tool(case.tool, case.arguments)
                    if mcp_bytes(result) != expected or (
                        case.error is not None and result.is_error is not case.error
                    ):
                        mismatches.append((case.name, mcp_bytes(result), expected))
                assert mismatches == []
        finally:
            await backend.aclose()
    assert tree_hash(decoy) == before
