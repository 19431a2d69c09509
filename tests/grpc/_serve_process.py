"""``opsbroker serve`` as a separate process, for tests: start it, learn its address, stop it."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0  # a cold Python start with grpc on a loaded machine
STOP_TIMEOUT_S = 15.0


@dataclass
class ServeProcess:
    process: asyncio.subprocess.Process
    address: str
    lines: list[str]
    stopping: bool = False

    def stop(self) -> None:
        """SIGTERM the broker (once: a second SIGTERM while it cleans up would kill it)."""
        if not self.stopping:
            self.stopping = True
            self.process.send_signal(signal.SIGTERM)


@asynccontextmanager
async def serve_process(root: Path, token_file: Path, *extra: str) -> AsyncIterator[ServeProcess]:
    """Run ``python -m opsbroker serve --root ROOT --grpc 127.0.0.1:0`` until the block ends,
    then SIGTERM it and wait for a clean exit."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'proto'}"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "opsbroker",
        "serve",
        "--root",
        str(root),
        "--grpc",
        "127.0.0.1:0",
        "--token-file",
        str(token_file),
        *extra,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert process.stdout is not None
    lines: list[str] = []
    address = None
    served = ServeProcess(process, "", lines)
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            while address is None:
                raw = await process.stdout.readline()
                if not raw:
                    raise RuntimeError(f"opsbroker serve exited early: {lines}")
                line = raw.decode().rstrip("\n")
                lines.append(line)
                if " on grpc " in line:
                    address = line.rsplit(" on grpc ", 1)[1]
        async with asyncio.timeout(START_TIMEOUT_S):
            while True:  # the principal and token-file lines follow the address
                raw = await process.stdout.readline()
                lines.append(raw.decode().rstrip("\n"))
                if not raw or lines[-1].startswith("opsbroker: token file"):
                    break
        served.address = address
        yield served
    finally:
        if process.returncode is None:
            served.stop()
            try:
                async with asyncio.timeout(STOP_TIMEOUT_S):
                    rest = await process.stdout.read()
                    lines.extend(rest.decode().splitlines())
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
