"""The SDK's Streamable HTTP client on ``opsbroker mcp --root --http``: the runtime's tools, and
every call of the stdio table byte for byte the result ``execute_tool_calls`` gives."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession

from agent_side._mcp import embedded_broker
from agent_side.tools import ALL_TOOL_NAMES, create_all_tools

from ._client import CALL_TIMEOUT_S, direct_call, mcp_bytes
from ._http import KINDS, http_server, http_session
from ._workspace import build, tree_hash
from .test_stdio_tools import CASES, Case


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("mcphttp")
    root, decoy = base / "ws", base / "decoy"
    build(root, decoy)
    return root, decoy


@pytest.fixture(scope="module", params=KINDS)
def url(workspace: tuple[Path, Path], request: pytest.FixtureRequest) -> Iterator[str]:
    root = workspace[0]
    with http_server(root.parent, "--root", str(root), kind=request.param) as address:
        yield address


@pytest.fixture(scope="module")
async def session(url: str) -> AsyncIterator[ClientSession]:
    async with http_session(url) as client:
        yield client


@pytest.fixture(scope="module")
async def direct_tools(workspace: tuple[Path, Path]) -> AsyncIterator[list[Any]]:
    async with embedded_broker(workspace[0]) as backend:
        yield create_all_tools(cwd=backend.root, operations=backend)


async def test_lists_the_runtime_tools(
    session: ClientSession, workspace: tuple[Path, Path]
) -> None:
    listed = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert tuple(listed) == ALL_TOOL_NAMES
    for tool in create_all_tools(cwd=str(workspace[0])):
        assert listed[tool.name].description == tool.description
        assert listed[tool.name].input_schema == tool.parameters_schema
        assert listed[tool.name].annotations is not None


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_result_is_the_loops(
    case: Case, session: ClientSession, direct_tools: list[Any], workspace: tuple[Path, Path]
) -> None:
    root, decoy = workspace
    build(root, decoy)
    before = tree_hash(decoy)
    with anyio.fail_after(CALL_TIMEOUT_S):
        expected = await direct_call(direct_tools, case.tool, case.arguments)
    build(root, decoy)
    with anyio.fail_after(CALL_TIMEOUT_S):
        result = await session.call_tool(case.tool, case.arguments)
    got = mcp_bytes(result)
    assert got == expected
    if case.error is not None:
        assert result.is_error is case.error, got
    assert tree_hash(decoy) == before
