"""A broker serving the sandboxd surface on loopback, in a subprocess.

A subprocess, as a user runs it (``python -m opsbroker serve --sandboxd``), with the SDK in the
test process. (Our ``process.v1`` descriptors live in a pool of their own, so the two could share
one interpreter: ``test_sdk.py::test_our_descriptors_and_the_sdks_load_in_one_process``.)
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Sandboxd:
    root: Path
    grpc: str  # HOST:PORT of ProcessService
    http: str  # HOST:PORT of the REST API
    token: str
    process: subprocess.Popen[str]

    @property
    def base(self) -> str:
        return f"http://{self.http}"

    @property
    def headers(self) -> dict[str, str]:
        return {"X-Opsbroker-Token": self.token}


def start_broker(
    tmp: Path, policy: str | None = None, config: Path | None = None, extra: Sequence[str] = ()
) -> Sandboxd:
    root = tmp / "ws"
    root.mkdir()
    token = secrets.token_urlsafe(16)
    tokens = tmp / "tokens"
    tokens.write_text(f"{token} tester\n")
    tokens.chmod(0o600)
    args = [
        sys.executable, "-m", "opsbroker", "serve", "--root", str(root),
        "--grpc", f"unix:{tmp}/broker.sock", "--token-file", str(tokens),
        "--sandboxd-grpc", "127.0.0.1:0", "--sandboxd-http", "127.0.0.1:0", "--quiet",
    ]  # fmt: skip
    args += extra
    if config is not None:
        args += ["--config", str(config)]
    if policy is not None:
        (tmp / "policy.toml").write_text(policy)
        args += ["--policy", str(tmp / "policy.toml")]
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'proto'}", "SANDBOX_ID": "sb-1",
           "SANDBOX_API_KEY": "hidden", "XDG_STATE_HOME": str(tmp / "state")}  # fmt: skip
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp
    )
    found: dict[str, str] = {}
    deadline = time.monotonic() + 30
    assert proc.stdout is not None
    while len(found) < 2 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        match = re.search(r"on (sandboxd-grpc|sandboxd-http) (\S+)", line)
        if match:
            found[match.group(1)] = match.group(2)
    if len(found) < 2:
        proc.kill()
        raise RuntimeError(f"broker did not start: {proc.stdout.read()}")
    return Sandboxd(root, found["sandboxd-grpc"], found["sandboxd-http"], token, proc)


def stop_broker(broker: Sandboxd) -> None:
    broker.process.terminate()
    try:
        broker.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        broker.process.kill()
        broker.process.wait(timeout=10)
    if broker.process.stdout is not None:
        broker.process.stdout.close()


@pytest.fixture
def sandboxd(tmp_path: Path) -> Iterator[Sandboxd]:
    broker = start_broker(tmp_path)
    try:
        yield broker
    finally:
        stop_broker(broker)
