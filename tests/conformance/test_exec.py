"""exec on every backend: output, exit codes, env, cwd (only the commands of _commands.py)."""

from __future__ import annotations

import asyncio

import pytest

from operations import (
    Backend,
    BashOperations,
    EscapesRoot,
    ExecResult,
    NotADirectory,
    NotFound,
    PowerShellOperations,
)
from tests.conformance import _commands as cmd
from tests.conformance._workspace import Workspace


class Output:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def __call__(self, data: bytes) -> None:
        assert isinstance(data, bytes)
        self.chunks.append(data)

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)


async def run(
    ws: Workspace, command: str, rel: str = "", **options: object
) -> tuple[ExecResult, bytes]:
    out = Output()
    result = await ws.ops.exec(command, ws.path(rel), on_data=out, **options)  # type: ignore[arg-type]
    return result, out.data


async def test_output_and_exit_code(ws: Workspace) -> None:
    assert await run(ws, cmd.ECHO_HI) == (ExecResult(0), b"hi\n")
    assert await run(ws, cmd.EXIT_3) == (ExecResult(3), b"")
    assert await run(ws, cmd.PRINTF_NO_NEWLINE) == (ExecResult(0), b"a\nb")


async def test_stdout_and_stderr_are_merged(ws: Workspace) -> None:
    assert await run(ws, cmd.OUT_AND_ERR) == (ExecResult(0), b"out\nerr\n")


async def test_command_not_found(ws: Workspace) -> None:
    result, output = await run(ws, cmd.MISSING)
    assert result == ExecResult(127)
    assert b"opsbroker-no-such-command" in output and b"command not found" in output


async def test_many_lines_arrive_complete_and_in_order(ws: Workspace) -> None:
    result, output = await run(ws, cmd.SEQ)
    assert result == ExecResult(0)
    assert output == "".join(f"{n}\n" for n in range(1, cmd.SEQ_LINES + 1)).encode()


async def test_slow_consumer_gets_everything(ws: Workspace) -> None:
    chunks: list[bytes] = []

    async def slow(data: bytes) -> None:
        chunks.append(data)
        await asyncio.sleep(0.001)

    result = await ws.ops.exec(cmd.SEQ, ws.root, on_data=slow)
    assert result == ExecResult(0)
    assert b"".join(chunks).count(b"\n") == cmd.SEQ_LINES


async def test_a_consumer_stalled_past_the_exit_gets_everything(ws: Workspace) -> None:
    """About 1 MB of output (it fits the broker's pipe): the command exits while ``on_data``
    holds the first chunk for half a second, several idle graces; the rest is still
    delivered, whole and in order."""
    lines = 150_000
    chunks: list[bytes] = []

    async def stalled(data: bytes) -> None:
        chunks.append(data)
        if len(chunks) == 1:
            await asyncio.sleep(0.5)

    result = await ws.ops.exec(f"seq 1 {lines}", ws.root, on_data=stalled)
    assert result == ExecResult(0)
    assert b"".join(chunks) == "".join(f"{n}\n" for n in range(1, lines + 1)).encode()


async def test_env_is_passed(ws: Workspace) -> None:
    result, output = await run(ws, cmd.ECHO_ENV, env={cmd.ENV_VAR: "from-env"})
    assert (result, output) == (ExecResult(0), b"from-env\n")


async def test_cwd(ws: Workspace) -> None:
    ws.make(["sub/deeper/"])
    assert await run(ws, cmd.PWD) == (ExecResult(0), ws.root.encode() + b"\n")
    assert await run(ws, cmd.PWD, "sub/deeper") == (
        ExecResult(0),
        ws.path("sub/deeper").encode() + b"\n",
    )


async def test_cwd_errors(ws: Workspace) -> None:
    ws.make(["f"])
    with pytest.raises(NotFound):
        await run(ws, cmd.ECHO_HI, "missing")
    with pytest.raises(NotADirectory):
        await run(ws, cmd.ECHO_HI, "f")
    with pytest.raises(EscapesRoot):
        await ws.ops.exec(cmd.ECHO_HI, ws.outside, on_data=Output())


async def test_concurrent_commands(ws: Workspace) -> None:
    results = await asyncio.gather(*(run(ws, cmd.ECHO_HI) for _ in range(10)))
    assert results == [(ExecResult(0), b"hi\n")] * 10


async def test_backend_surface(ws: Workspace) -> None:
    """Every interface is there; pwsh itself may be absent, so only its shape is checked here."""
    assert isinstance(ws.ops, Backend)
    assert isinstance(ws.ops, BashOperations)
    assert isinstance(ws.ops.powershell, PowerShellOperations)
    assert ws.ops.root == ws.root
