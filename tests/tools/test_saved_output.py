"""A truncated command output's full copy: saved in the workspace, where ``read`` reaches it, and
bounded in count, size and age (:mod:`agent_side.tools._saved_output`)."""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from agent_side.tools import _saved_output, create_bash_tool
from agent_side.tools._saved_output import OUTPUT_DIR, keep_full_output
from operations import ExecResult, InMemoryOperations, PermissionDenied
from tests.tools._call import call, text

NOISY = "".join(f"{i}\n" for i in range(1, 3001)).encode()  # beyond 2000 lines: truncated


class NoisyExec:
    """An ``exec`` (and nothing else: no files, no root) printing 3000 lines."""

    async def exec(self, command: str, cwd: str, **options: Any) -> ExecResult:
        options["on_data"](NOISY)
        return ExecResult(0)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _full_output_path(out: str) -> str:
    found = re.search(r"Full output: (\S+)\]$", out)
    assert found is not None, out
    return found.group(1)


async def test_memory_backend_keeps_at_most_max_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_saved_output, "MAX_FILES", 3)
    ops = InMemoryOperations()

    async def noisy(ctx: Any) -> int:
        await ctx.emit(NOISY)
        return 0

    ops.commands.register("noisy", noisy)
    bash = create_bash_tool(ops.root, operations=ops)
    paths = []
    for _ in range(5):
        paths.append(_full_output_path(text(await call(bash, command="noisy"))))
    directory = f"{ops.root}/{OUTPUT_DIR}"
    left = sorted(await ops.readdir(directory))
    assert len(left) == 3
    assert paths[-1].rsplit("/", 1)[1] in left  # the newest is never pruned
    assert await ops.read_file(paths[-1]) == NOISY
    assert os.listdir(tempfile.gettempdir()) == []


async def test_a_larger_output_keeps_its_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_saved_output, "MAX_FILE_BYTES", 1000)
    ops = InMemoryOperations()
    spill = Path(tempfile.gettempdir()) / "pi-bash-0123456789abcdef.log"
    spill.write_bytes(NOISY)
    path = await keep_full_output(ops, ops.root, str(spill))
    assert path == f"{ops.root}/{OUTPUT_DIR}/pi-bash-0123456789abcdef.log"
    assert await ops.read_file(path) == NOISY[-1000:]
    assert not spill.exists()


async def test_without_a_backend_to_save_to_the_local_spill_is_named_and_pruned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_saved_output, "MAX_FILES", 2)
    spill_dir = Path(tempfile.gettempdir())
    stale = spill_dir / "pi-bash-00000000000000aa.log"
    stale.write_bytes(b"old")
    week_ago = time.time() - 7 * 24 * 3600
    os.utime(stale, (week_ago, week_ago))
    other_tool = spill_dir / "pi-powershell-00000000000000bb.log"
    other_tool.write_bytes(b"not ours")
    bash = create_bash_tool("/w", operations=NoisyExec())  # type: ignore[arg-type]
    paths = [_full_output_path(text(await call(bash, command="noisy"))) for _ in range(4)]
    assert all(p.startswith(str(spill_dir)) for p in paths)
    assert _read(paths[-1]) == NOISY  # the reference's behaviour, bounded
    assert not stale.exists()  # too old
    left = sorted(n for n in os.listdir(spill_dir) if n.startswith("pi-bash-"))
    assert left == sorted(Path(p).name for p in paths[-2:])
    assert other_tool.exists()  # another tool's files are its own to prune


async def test_a_backend_that_refuses_the_write_falls_back_to_the_local_spill() -> None:
    ops = InMemoryOperations()

    async def refuse(path: str, content: bytes | str) -> None:
        raise PermissionDenied("write", path, "read-only workspace")

    ops.write_file = refuse  # type: ignore[method-assign]
    spill = Path(tempfile.gettempdir()) / "pi-bash-00000000000000cc.log"
    spill.write_bytes(NOISY)
    assert await keep_full_output(ops, ops.root, str(spill)) == str(spill)
    assert spill.read_bytes() == NOISY
