"""Running ``opsbroker`` as a user does: a subprocess of this interpreter, the source on its path."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncssh

REPO = Path(__file__).resolve().parents[2]
COMMAND_TIMEOUT_S = 60  # one CLI run; far above the few seconds it needs, so a hang fails fast
SERVE_READY_S = 30  # a broker prints its address well within this on a loaded machine


def cli_env() -> dict[str, str]:
    """The environment of a CLI run: the source tree (and its generated wire code) importable."""
    env = dict(os.environ)
    paths = [str(REPO), str(REPO / "proto")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.pop("OPSBROKER_TOKEN", None)
    return env


def opsbroker(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``opsbroker ARGS`` and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "opsbroker", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=REPO,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@dataclass
class Served:
    """A running ``opsbroker serve``: its gRPC URL and token file, and its SSH URL and the options
    a client needs for it (``--identity KEY --known-hosts FILE``)."""

    url: str
    token_file: Path
    root: Path
    ssh_url: str
    ssh_options: list[str]

    @property
    def token(self) -> str:
        line = next(
            ln for ln in self.token_file.read_text().splitlines() if ln and not ln.startswith("#")
        )
        return line.split()[0]


@contextmanager
def serving(root: Path, state: Path) -> Iterator[Served]:
    """``opsbroker serve --root ROOT --grpc 127.0.0.1:0 --ssh 127.0.0.1:0`` in the background,
    with a fresh client key and host key; stopped on exit."""
    token_file = state / "tokens"
    for name in ("client_key", "host_key"):
        key = asyncssh.generate_private_key("ssh-ed25519", comment=f"cli-test-{name}")
        key.write_private_key(str(state / name))
        key.write_public_key(str(state / f"{name}.pub"))
    (state / "authorized_keys").write_bytes((state / "client_key.pub").read_bytes())
    out = (state / "serve.out").open("w+")
    proc = subprocess.Popen(
        [
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
            "--ssh",
            "127.0.0.1:0",
            "--ssh-authorized-keys",
            str(state / "authorized_keys"),
            "--ssh-host-key",
            str(state / "host_key"),
            "--quiet",
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=cli_env(),
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + SERVE_READY_S
        grpc_found = ssh_found = None
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
            printed = (state / "serve.out").read_text()
            grpc_found = re.search(r"on grpc (\S+)", printed)
            ssh_found = re.search(r"on ssh (\S+):(\d+)", printed)
            if grpc_found and ssh_found:
                break
        assert grpc_found and ssh_found, (state / "serve.out").read_text()
        host, port = ssh_found.groups()
        host_key = (state / "host_key.pub").read_text().strip()
        (state / "known_hosts").write_text(f"[{host}]:{port} {host_key}\n")
        yield Served(
            url=f"grpc://{grpc_found.group(1)}",
            token_file=token_file,
            root=root,
            ssh_url=f"ssh://agent@{host}:{port}",
            ssh_options=[
                "--identity",
                str(state / "client_key"),
                "--known-hosts",
                str(state / "known_hosts"),
            ],
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.close()


def assert_one_line_failure(proc: subprocess.CompletedProcess[str], status: int) -> str:
    """The command failed with ``status`` and said why in one line on stderr, no traceback."""
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert proc.returncode == status, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("opsbroker "), lines[0]
    return lines[0]
