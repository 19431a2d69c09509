"""The MCP filesystem server's path advisories, replayed through ``opsbroker mcp``: each refused,
and the decoy outside the root (hashed before and after) unchanged.

CVE-2025-53109/53110 (symlink and prefix escapes), GHSA-53mr-w429-c597 (parent swapped for a
symlink between check and write), GHSA-7rgq-gccq-qphx (trailing whitespace stripped by the check,
kept by the open), GHSA-p9cv-8g75-4xcg (FIFO and device reads that hang or never end),
GHSA-7m4x-rv66-mxhh (move source swapped for a symlink; there is no move tool, so the swap is
replayed against ``read`` and ``edit``, which open the source the same way).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession

from ._client import CALL_TIMEOUT_S, mcp_session
from ._workspace import SECRET, build, tree_hash

ROUNDS = 60  # calls per race; each round is one MCP round trip


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[tuple[Path, list[Path]]]:
    root, decoy = tmp_path / "ws", tmp_path / "decoy"
    build(root, decoy)
    prefix_decoy = tmp_path / "ws "  # the root's name plus a trailing space
    prefix_decoy.mkdir()
    (prefix_decoy / "secret").write_bytes(SECRET)
    decoys = [decoy, prefix_decoy]
    before = [tree_hash(d) for d in decoys]
    yield root, decoys
    assert [tree_hash(d) for d in decoys] == before


@pytest.fixture
async def session(workspace: tuple[Path, list[Path]]) -> AsyncIterator[ClientSession]:
    async with mcp_session("--root", str(workspace[0])) as client:
        yield client


async def _call(
    session: ClientSession, tool: str, arguments: dict[str, object]
) -> tuple[bool, str]:
    with anyio.fail_after(CALL_TIMEOUT_S):
        result = await session.call_tool(tool, arguments)
    text = "".join(getattr(block, "text", "") for block in result.content)
    assert SECRET.decode().strip() not in text
    return result.is_error, text


@contextlib.contextmanager
def swapping(path: Path, make_real: object, target: Path) -> Iterator[None]:
    """A thread that swaps ``path`` between a real entry and a symlink to ``target`` until exit."""
    stop = threading.Event()

    def run() -> None:
        for _ in range(1_000_000):  # bounded; stops long before at the stop event
            if stop.is_set():
                return
            with contextlib.suppress(OSError):
                os.symlink(target, f"{path}.link")
                os.replace(f"{path}.link", path)
            with contextlib.suppress(OSError):
                os.unlink(path)
                make_real()  # type: ignore[operator]

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)
        assert not thread.is_alive()


async def test_symlink_escapes_refused(
    session: ClientSession, workspace: tuple[Path, list[Path]]
) -> None:
    calls = [
        ("read", {"path": "out/secret"}),
        ("read", {"path": "out_file"}),
        ("write", {"path": "out/planted", "content": "x"}),
        ("write", {"path": "out_file", "content": "x"}),
        ("edit", {"path": "out_file", "edits": [{"oldText": "decoy", "newText": "x"}]}),
        ("ls", {"path": "out"}),
        ("grep", {"pattern": "decoy", "path": "out"}),
        ("find", {"pattern": "*", "path": "out"}),
    ]
    for tool, arguments in calls:
        is_error, text = await _call(session, tool, arguments)
        assert is_error, (tool, arguments, text)


async def test_prefix_and_trailing_whitespace_refused(
    session: ClientSession, workspace: tuple[Path, list[Path]]
) -> None:
    root = workspace[0]
    for tool, arguments in [
        ("read", {"path": f"{root} /secret"}),
        ("write", {"path": f"{root} /planted", "content": "x"}),
        ("ls", {"path": f"{root} "}),
        ("read", {"path": f"{root}/../ws /secret"}),
    ]:
        is_error, text = await _call(session, tool, arguments)
        assert is_error, (tool, arguments, text)
    # Inside the root a trailing space names its own file, never the file without it.
    is_error, _ = await _call(session, "write", {"path": "a.txt ", "content": "spaced"})
    assert not is_error
    assert (root / "a.txt ").read_text() == "spaced"
    assert (root / "a.txt").read_text() == "hello\nworld\n"


async def test_fifo_and_device_reads_answer(
    session: ClientSession, workspace: tuple[Path, list[Path]]
) -> None:
    root = workspace[0]
    os.mkfifo(root / "fifo")
    (root / "zero").symlink_to("/dev/zero")
    for tool, arguments in [
        ("read", {"path": "fifo"}),
        ("edit", {"path": "fifo", "edits": [{"oldText": "a", "newText": "b"}]}),
        ("read", {"path": "zero"}),
    ]:
        is_error, text = await _call(session, tool, arguments)  # bounded: a hang fails here
        assert is_error, (tool, arguments, text)


async def test_parent_swapped_for_symlink_during_writes(
    session: ClientSession, workspace: tuple[Path, list[Path]]
) -> None:
    root, (decoy, _) = workspace
    sub = root / "sub"
    sub.mkdir()
    with swapping(sub, lambda: sub.mkdir(), decoy):
        for i in range(ROUNDS):
            await _call(session, "write", {"path": f"sub/f{i}.txt", "content": "planted"})
    assert not any(p.name.startswith("f") for p in decoy.iterdir())


async def test_source_swapped_for_symlink_during_reads_and_edits(
    session: ClientSession, workspace: tuple[Path, list[Path]]
) -> None:
    root, (decoy, _) = workspace
    src = root / "src"
    src.write_text("decoy-shaped text\n")
    with swapping(src, lambda: src.write_text("decoy-shaped text\n"), decoy / "secret"):
        for _ in range(ROUNDS):
            await _call(session, "read", {"path": "src"})
            await _call(
                session, "edit", {"path": "src", "edits": [{"oldText": "decoy", "newText": "x"}]}
            )
