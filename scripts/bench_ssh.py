#!/usr/bin/env python3
"""SSH transport benchmarks: the SSH backend beside the gRPC backend and against OpenSSH.

Usage: ``python scripts/bench_ssh.py [names...]`` from the repository root (all benchmarks when no
name is given). Each benchmark is a named function that prints one line: its figures and ratios,
all measured in one run against one broker process (``opsbroker serve --grpc ... --ssh ...``)
and one OpenSSH ``sshd`` on loopback, reached through a ControlMaster connection (``ssh -S``) and
through ``sftp``. ``scripts/bench.py`` can register these too (``BENCHMARKS.update(...)``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(HERE), str(HERE / "proto")]

import asyncssh  # noqa: E402

from agent_side import connect  # noqa: E402
from operations import Backend  # noqa: E402

BENCHMARKS: dict[str, Callable[[], None]] = {}

CALLS = 200  # per-call samples through the Python backends
OPENSSH_CALLS = 40  # per-call samples through an ssh client process (each forks one)
BIG = 64 * 1024 * 1024  # throughput file size
SSHD = "/usr/sbin/sshd"
START_TIMEOUT_S = 30.0  # a broker or sshd that is not up by then is a failure


def benchmark(fn: Callable[[], None]) -> Callable[[], None]:
    BENCHMARKS[fn.__name__] = fn
    return fn


@dataclass
class Rig:
    """One broker process (gRPC and SSH), an sshd with a ControlMaster, and their clients."""

    tmp: Path
    root: Path
    ssh_backend: Backend
    grpc_backend: Backend
    openssh: list[str]  # ``ssh -S ctl ... host`` prefix; None-equivalent is [] without sshd
    sftp: list[str]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _start_broker(tmp: Path, root: Path) -> tuple[asyncio.subprocess.Process, str, str]:
    keys = tmp / "keys"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE / "proto")])}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "opsbroker", "serve", "--root", str(root),
        "--grpc", "127.0.0.1:0", "--ssh", "127.0.0.1:0", "--quiet",
        "--token-file", str(tmp / "tokens"), "--ssh-authorized-keys", str(keys / "authorized_keys"),
        "--ssh-host-key", str(keys / "broker_host_key"),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    grpc_addr = ssh_addr = ""
    async with asyncio.timeout(START_TIMEOUT_S):
        while not (grpc_addr and ssh_addr):
            line = (await proc.stdout.readline()).decode()
            if not line:
                raise RuntimeError("the broker exited before it was serving")
            if " on grpc " in line:
                grpc_addr = line.rsplit(" ", 1)[1].strip()
            if " on ssh " in line:
                ssh_addr = line.rsplit(" ", 1)[1].strip()
    return proc, grpc_addr, ssh_addr


def _openssh_options(keys: Path, known_hosts: Path) -> list[str]:
    return [
        "-F", "/dev/null", "-i", str(keys / "client"), "-o", "IdentitiesOnly=yes",
        "-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes",
        "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
    ]  # fmt: skip


def _start_sshd(tmp: Path, keys: Path) -> tuple[subprocess.Popen[bytes], list[str], list[str]]:
    """sshd on loopback and a ControlMaster connection to it: (sshd, ssh prefix, sftp prefix)."""
    port = _free_port()
    host_key = keys / "sshd_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    config = tmp / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {keys / 'authorized_keys'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nStrictModes no\n"
        f"UsePAM no\nPidFile {tmp / 'sshd.pid'}\nSubsystem sftp internal-sftp\nLogLevel ERROR\n"
    )
    os.makedirs("/run/sshd", exist_ok=True)
    sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.DEVNULL)
    known_hosts = tmp / "sshd_known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {(keys / 'sshd_host_key.pub').read_text()}")
    user = os.environ.get("USER") or "root"
    options = _openssh_options(keys, known_hosts)
    control = tmp / "ctl"
    target = [f"{user}@127.0.0.1"]
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:  # sshd takes a moment to listen
        master = subprocess.run(
            ["ssh", *options, "-p", str(port), "-M", "-S", str(control), "-o", "ControlPersist=yes",
             "-f", "-N", *target], stdin=subprocess.DEVNULL, capture_output=True,
        )  # fmt: skip
        if master.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if master.returncode != 0:
        raise RuntimeError(f"no ControlMaster connection to sshd: {master.stderr.decode()}")
    ssh = ["ssh", *options, "-p", str(port), "-S", str(control), *target]
    sftp = ["sftp", *options, "-P", str(port), "-o", f"ControlPath={control}", *target]
    return sshd, ssh, sftp


@contextlib.asynccontextmanager
async def _rig() -> AsyncIterator[Rig]:
    tmp = Path(tempfile.mkdtemp(prefix="opsbroker-bench-"))
    root = tmp / "root"
    root.mkdir()
    (root / "file4k").write_bytes(os.urandom(4096))
    (root / "big").write_bytes(os.urandom(BIG))
    keys = tmp / "keys"
    keys.mkdir()
    client = asyncssh.generate_private_key("ssh-ed25519", comment="bench")
    client.write_private_key(str(keys / "client"))
    (keys / "client").chmod(0o600)
    (keys / "authorized_keys").write_bytes(client.export_public_key())
    broker, grpc_addr, ssh_addr = await _start_broker(tmp, root)
    sshd = None
    stack = contextlib.AsyncExitStack()
    try:
        host_key = asyncssh.read_private_key(keys / "broker_host_key")
        known = tmp / "broker_known_hosts"
        host, port = ssh_addr.rsplit(":", 1)
        known.write_text(f"[{host}]:{port} {host_key.export_public_key().decode()}")
        token = next(
            line.split()[0]
            for line in (tmp / "tokens").read_text().splitlines()
            if line.strip() and not line.startswith("#")
        )
        ssh_backend = await stack.enter_async_context(
            connect(f"ssh://bench@{ssh_addr}", client_keys=[str(keys / "client")],
                    known_hosts=str(known))
        )  # fmt: skip
        grpc_backend = await stack.enter_async_context(connect(f"grpc://{grpc_addr}", token=token))
        openssh: list[str] = []
        sftp: list[str] = []
        if os.path.exists(SSHD) and shutil.which("ssh"):  # noqa: ASYNC240 (set-up, not measured)
            sshd, openssh, sftp = _start_sshd(tmp, keys)
        yield Rig(tmp, root, ssh_backend, grpc_backend, openssh, sftp)
    finally:
        await stack.aclose()
        if sshd is not None:
            subprocess.run([*openssh[:-1], "-O", "exit", openssh[-1]], capture_output=True)  # noqa: ASYNC221
            sshd.terminate()
            sshd.wait(10)
        broker.terminate()
        await asyncio.wait_for(broker.wait(), 20)
        shutil.rmtree(tmp, ignore_errors=True)


async def _median_call(call: Callable[[], Awaitable[object]], rounds: int = CALLS) -> float:
    for _ in range(5):  # warm the channel pool and caches
        await call()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        await call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def _median_process(argv: list[str], rounds: int = OPENSSH_CALLS) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
        )
        if await proc.wait() != 0:
            raise RuntimeError(f"{argv[-1]!r} failed")
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def _timed_process(argv: list[str], stdin: Path | None = None) -> float:
    start = time.perf_counter()
    with open(stdin or os.devnull, "rb") as source:  # noqa: ASYNC230
        proc = await asyncio.create_subprocess_exec(*argv, stdin=source, stdout=subprocess.DEVNULL)
        if await proc.wait() != 0:
            raise RuntimeError(f"{argv!r} failed")
    return time.perf_counter() - start


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def _mbps(seconds: float) -> str:
    return f"{BIG / seconds / 1e6:.0f} MB/s"


@benchmark
def ssh_exec_true() -> None:
    """Per-call latency of ``exec("true")``: SSH backend, gRPC backend, OpenSSH over ControlMaster."""

    async def run() -> str:
        async with _rig() as rig:
            root = str(rig.root)

            def exec_on(backend: Backend) -> Callable[[], Awaitable[object]]:
                return lambda: backend.exec("true", root, on_data=lambda _: None)

            ssh = await _median_call(exec_on(rig.ssh_backend))
            grpc = await _median_call(exec_on(rig.grpc_backend))
            parts = [
                f"ssh backend {_ms(ssh)}",
                f"grpc backend {_ms(grpc)} (ssh/grpc {ssh / grpc:.2f}x)",
            ]
            if rig.openssh:
                mux = await _median_process([*rig.openssh, "true"])
                parts.append(f"openssh mux {_ms(mux)} (ssh/openssh {ssh / mux:.2f}x, target < 1)")
            return "; ".join(parts)

    print("ssh_exec_true (median):", asyncio.run(run()))


@benchmark
def ssh_read_4k() -> None:
    """Per-call latency of a 4 KiB read: SSH backend, gRPC backend, ``ssh -S cat``, ``sftp get``."""

    async def run() -> str:
        async with _rig() as rig:
            path = str(rig.root / "file4k")
            ssh = await _median_call(lambda: rig.ssh_backend.read_file(path))
            grpc = await _median_call(lambda: rig.grpc_backend.read_file(path))
            parts = [
                f"ssh backend {_ms(ssh)}",
                f"grpc backend {_ms(grpc)} (ssh/grpc {ssh / grpc:.2f}x)",
            ]
            if rig.openssh:
                mux = await _median_process([*rig.openssh, f"cat {path}"])
                batch = rig.tmp / "sftp_batch"
                batch.write_text(f"get {path} /dev/null\n" * OPENSSH_CALLS)
                once = rig.tmp / "sftp_once"
                once.write_text("pwd\n")
                total = await _timed_process([*rig.sftp[:-1], "-b", str(batch), rig.sftp[-1]])
                setup = await _timed_process([*rig.sftp[:-1], "-b", str(once), rig.sftp[-1]])
                sftp = max(total - setup, 1e-9) / OPENSSH_CALLS
                parts.append(f"openssh mux cat {_ms(mux)} (ssh/openssh {ssh / mux:.2f}x)")
                parts.append(f"sftp get {_ms(sftp)} (ssh/sftp {ssh / sftp:.2f}x)")
            return "; ".join(parts)

    print("ssh_read_4k (median):", asyncio.run(run()))


@benchmark
def ssh_throughput_64m() -> None:
    """64 MiB read and write: SSH backend, gRPC backend, ``ssh -S cat``, ``sftp get/put``."""

    async def run() -> str:
        async with _rig() as rig:
            big = rig.root / "big"
            data = big.read_bytes()

            async def timed(call: Callable[[], Awaitable[object]]) -> float:
                start = time.perf_counter()
                await call()
                return time.perf_counter() - start

            ssh_r = await timed(lambda: rig.ssh_backend.read_file(str(big)))
            ssh_w = await timed(lambda: rig.ssh_backend.write_file(str(rig.root / "w1"), data))
            grpc_r = await timed(lambda: rig.grpc_backend.read_file(str(big)))
            grpc_w = await timed(lambda: rig.grpc_backend.write_file(str(rig.root / "w2"), data))
            parts = [
                f"ssh backend read {_mbps(ssh_r)} write {_mbps(ssh_w)}",
                f"grpc backend read {_mbps(grpc_r)} write {_mbps(grpc_w)} "
                f"(ssh/grpc time {ssh_r / grpc_r:.2f}x read, {ssh_w / grpc_w:.2f}x write)",
            ]
            if rig.openssh:
                cat_r = await _timed_process([*rig.openssh, f"cat {big}"])
                cat_w = await _timed_process([*rig.openssh, f"cat > {rig.root / 'w3'}"], big)
                batch = rig.tmp / "sftp_big"
                batch.write_text(f"get {big} {rig.tmp / 'got'}\n")
                sftp_r = await _timed_process([*rig.sftp[:-1], "-b", str(batch), rig.sftp[-1]])
                batch.write_text(f"put {big} {rig.root / 'w4'}\n")
                sftp_w = await _timed_process([*rig.sftp[:-1], "-b", str(batch), rig.sftp[-1]])
                parts.append(
                    f"openssh mux cat read {_mbps(cat_r)} write {_mbps(cat_w)} "
                    f"(ssh/openssh time {ssh_r / cat_r:.2f}x read, {ssh_w / cat_w:.2f}x write)"
                )
                parts.append(f"sftp get {_mbps(sftp_r)} put {_mbps(sftp_w)}")
            return "; ".join(parts)

    print("ssh_throughput_64m:", asyncio.run(run()))


def main(argv: list[str]) -> int:
    names = argv or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
        return 2
    for name in names:
        BENCHMARKS[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
