"""The event loop the ``opsbroker`` commands run on: uvloop unless ``OPSBROKER_EVENT_LOOP=asyncio``
says otherwise; any other value is a usage error, one line, never a traceback."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import pytest
import uvloop
from opsbroker import eventloop

from agent_side import connect
from operations import ExecResult
from tests.grpc._serve_process import serve_process

from ._run import opsbroker

EXIT_USAGE = 2


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_run_uses_uvloop_by_default_and_asyncio_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(eventloop.ENV_VAR, raising=False)
    assert eventloop.run(_loop_module()) == "uvloop"
    monkeypatch.setenv(eventloop.ENV_VAR, "asyncio")
    assert eventloop.run(_loop_module()).startswith("asyncio.")
    assert eventloop.loop_factory("uvloop") is uvloop.new_event_loop


def test_a_bad_value_is_refused_before_the_coroutine_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(eventloop.ENV_VAR, "trio")
    main = _loop_module()
    with pytest.raises(eventloop.EventLoopError, match=r"OPSBROKER_EVENT_LOOP='trio'.*uvloop"):
        eventloop.run(main)
    assert inspect.getcoroutinestate(main) == inspect.CORO_CLOSED  # not left to warn


@pytest.mark.parametrize("wanted", ["uvloop", "asyncio"])
async def test_serve_runs_on_the_loop_asked_for(
    wanted: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(eventloop.ENV_VAR, wanted)
    root = tmp_path / "ROOT"
    root.mkdir()
    tokens = tmp_path / "tokens"
    async with serve_process(root, tokens) as served:
        assert f"opsbroker: event loop: {wanted}" in served.lines
        maps = Path(f"/proc/{served.process.pid}/maps").read_text()  # noqa: ASYNC240
        assert ("uvloop" in maps) == (wanted == "uvloop")
        lines = tokens.read_text().splitlines()
        token = next(ln for ln in lines if not ln.startswith("#"))
        async with connect(f"grpc://{served.address}", token=token.split()[0]) as ops:
            out: list[bytes] = []
            result = await ops.exec("echo $((6*7))", ops.root, on_data=out.append)
            assert (result, b"".join(out)) == (ExecResult(0), b"42\n")


@pytest.mark.parametrize(
    ("argv", "prefix"),
    [
        (["serve", "--root", "."], "opsbroker serve: "),
        (["call", "memory:", "ls", "{}"], "opsbroker call: "),
    ],
)
def test_commands_refuse_a_bad_value_in_one_line(
    argv: list[str], prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(eventloop.ENV_VAR, "fastest")
    proc = opsbroker(*argv)
    assert proc.returncode == EXIT_USAGE, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(prefix) and "OPSBROKER_EVENT_LOOP='fastest'" in lines[0], lines[0]
    assert "uvloop, asyncio" in lines[0]
