"""A broker process killed with SIGKILL fails the client's calls fast, with Unavailable: a
read-only call within ``reconnect_wait`` (not the 300 s ``call_timeout``), a running ``exec``
at once (not at its timeout plus grace), a call that changes something at once."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from agent_side import connect
from agent_side._remote.grpc import RECONNECT_WAIT
from operations import Unavailable

from ._run import REPO, SERVE_READY_S, cli_env

SLACK_S = 3.0  # on top of the wait under test: a loaded 2-core machine
SLEEP_MARK = "30.0731"  # `sleep` argument that names the command a test leaves orphaned


@contextmanager
def _broker(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, str]]:
    """``opsbroker serve`` on a loopback port: (process, grpc URL, token). Killed by PID."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    out_path = tmp_path / "serve.out"
    with out_path.open("w") as out:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "opsbroker", "serve", "--root", str(root), "--quiet"),
                *("--grpc", "127.0.0.1:0", "--token-file", str(tmp_path / "tokens")),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=cli_env(),
            cwd=REPO,
        )
    try:
        deadline = time.monotonic() + SERVE_READY_S
        found = None
        while found is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
            found = re.search(r"on grpc (\S+)", out_path.read_text())
        assert found, out_path.read_text()
        token = (tmp_path / "tokens").read_text().splitlines()[1].split()[0]
        yield proc, f"grpc://{found.group(1)}", token
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        _kill_orphans()


def _kill_orphans() -> None:
    """Kill, by PID, the marked ``sleep`` a SIGKILLed broker may leave behind."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[:2] == [b"sleep", SLEEP_MARK.encode()]:
            with suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)


async def test_read_only_call_after_the_broker_died_fails_within_reconnect_wait(
    tmp_path: Path,
) -> None:
    with _broker(tmp_path) as (proc, url, token):
        async with connect(url, token=token) as ops:
            assert await ops.read_file(f"{ops.root}/a.txt") == b"a\n"
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            # A TimeoutError out of a bound is the failure: the client kept waiting.
            async with asyncio.timeout(RECONNECT_WAIT + SLACK_S):
                with pytest.raises(Unavailable, match="is it running"):
                    await ops.stat(ops.root)
            async with asyncio.timeout(RECONNECT_WAIT + SLACK_S):
                with pytest.raises(Unavailable):  # a streamed read too
                    await ops.read_file(f"{ops.root}/a.txt")
            async with asyncio.timeout(SLACK_S):
                with pytest.raises(Unavailable):  # a change is not retried at all
                    await ops.mkdir(f"{ops.root}/new")


async def test_running_exec_fails_at_once_when_the_broker_is_killed(tmp_path: Path) -> None:
    with _broker(tmp_path) as (proc, url, token):
        async with connect(url, token=token) as ops:
            seen = bytearray()

            def on_data(data: bytes) -> None:
                seen.extend(data)
                if b"started" in seen and proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)

            async with asyncio.timeout(SLACK_S + 2):
                with pytest.raises(Unavailable):
                    await ops.exec(
                        f"echo started; exec sleep {SLEEP_MARK}",
                        ops.root,
                        on_data=on_data,
                        timeout=120,  # the client would otherwise wait 120 s + exec_grace
                    )
            assert b"started" in seen
