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
import fcntl
import functools
import gc
import io
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(HERE), str(HERE / "proto")]

import opsbroker  # noqa: E402, F401  (first: its import quiets asyncssh's DSA warning)
from opsbroker import grpccore  # noqa: E402

grpccore.configure()  # as the opsbroker commands: before anything imports grpc

# isort: split
import asyncssh  # noqa: E402
from opsbroker import eventloop  # noqa: E402
from opsbroker.v1.codec import CHUNK_BYTES  # noqa: E402

from agent_side import connect  # noqa: E402
from operations import Backend  # noqa: E402

BENCHMARKS: dict[str, Callable[[], None]] = {}

CALLS = 200  # per-call samples through the Python backends
OPENSSH_CALLS = 40  # per-call samples through an ssh client process (each forks one)
BIG = 64 * 1024 * 1024  # throughput file size
# What a peer's output pipe holds and gives per read (_process_output).
OUTPUT_READ_BYTES = 1024 * 1024
SSHD = "/usr/sbin/sshd"
START_TIMEOUT_S = 30.0  # a broker or sshd that is not up by then is a failure
BENCH_POLICY = """\
max_read_bytes = 134217728
max_write_bytes = 134217728
[exec]
max_output_bytes = 134217728
"""
"""Limits above the 64 MiB workloads (the defaults refuse them, as they should for an agent)."""


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
    broker_pid: int = 0
    sshd_port: int = 0  # 0 when no sshd could start
    grpc_url: str = ""
    token: str = ""
    ssh_addr: str = ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _start_broker(
    tmp: Path, root: Path, event_loop: str
) -> tuple[asyncio.subprocess.Process, str, str]:
    keys = tmp / "keys"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE / "proto")]),
        eventloop.ENV_VAR: event_loop,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "opsbroker", "serve", "--root", str(root),
        "--grpc", "127.0.0.1:0", "--ssh", "127.0.0.1:0", "--quiet",
        "--token-file", str(tmp / "tokens"), "--ssh-authorized-keys", str(keys / "authorized_keys"),
        "--ssh-host-key", str(keys / "broker_host_key"), "--policy", str(tmp / "policy.toml"),
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
        "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "-o", "SetEnv=SHLVL=1",
    ]  # fmt: skip


def _start_sshd(tmp: Path, keys: Path) -> tuple[subprocess.Popen[bytes], list[str], list[str], int]:
    """sshd on loopback and a ControlMaster connection to it: (sshd, ssh prefix, sftp prefix,
    port)."""
    port = _free_port()
    host_key = keys / "sshd_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    config = tmp / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {keys / 'authorized_keys'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nStrictModes no\n"
        f"UsePAM no\nPidFile {tmp / 'sshd.pid'}\nSubsystem sftp internal-sftp\nLogLevel ERROR\n"
        # The client sends SHLVL=1, so bash started by sshd does not read the user's .bashrc
        # (bash reads it only for SHLVL < 2): shell start-up is the same as the broker's.
        "AcceptEnv SHLVL\nMaxSessions 64\nMaxStartups 64\n"
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
        sshd.terminate()
        sshd.wait(10)
        raise RuntimeError(f"no ControlMaster connection to sshd: {master.stderr.decode()}")
    ssh = ["ssh", *options, "-p", str(port), "-S", str(control), *target]
    sftp = ["sftp", *options, "-P", str(port), "-o", f"ControlPath={control}", *target]
    return sshd, ssh, sftp, port


@contextlib.asynccontextmanager
async def _rig(event_loop: str = "uvloop") -> AsyncIterator[Rig]:
    """The broker (on ``event_loop``: see ``opsbroker.eventloop``), sshd and their clients."""
    tmp = Path(tempfile.mkdtemp(prefix="opsbroker-bench-"))
    root = tmp / "root"
    root.mkdir()
    (root / "file4k").write_bytes(os.urandom(4096))
    (root / "big").write_bytes(os.urandom(BIG))
    (tmp / "policy.toml").write_text(BENCH_POLICY)
    keys = tmp / "keys"
    keys.mkdir()
    client = asyncssh.generate_private_key("ssh-ed25519", comment="bench")
    client.write_private_key(str(keys / "client"))
    (keys / "client").chmod(0o600)
    (keys / "authorized_keys").write_bytes(client.export_public_key())
    broker, grpc_addr, ssh_addr = await _start_broker(tmp, root, event_loop)
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
        sshd_port = 0
        if not (os.path.exists(SSHD) and shutil.which("ssh")):  # noqa: ASYNC240 (set-up)
            print(f"peer OpenSSH: cannot start, {SSHD} or ssh is not installed", flush=True)
        else:
            try:
                sshd, openssh, sftp, sshd_port = _start_sshd(tmp, keys)
            except (OSError, RuntimeError, subprocess.SubprocessError) as e:
                print(f"peer OpenSSH: cannot start ({e}); its figures are left out", flush=True)
        yield Rig(
            tmp, root, ssh_backend, grpc_backend, openssh, sftp,
            broker_pid=broker.pid, sshd_port=sshd_port, grpc_url=f"grpc://{grpc_addr}",
            token=token, ssh_addr=ssh_addr,
        )  # fmt: skip
    finally:
        await stack.aclose()
        if sshd is not None and openssh:
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
                mux = await _median_call(
                    lambda: _process_output([*rig.openssh, f"cat {path}"], 4096, whole=True),
                    OPENSSH_CALLS,
                )
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
                cat_r = await timed(
                    lambda: _process_output([*rig.openssh, f"cat {big}"], BIG, whole=True)
                )
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


# --- ours beside the peers, one run: every workload over both transports -------------------------

CONCURRENCY = 16  # commands in flight at once in the concurrent workload
CONCURRENT_ROUNDS = 10  # commands per in-flight slot
PEER_ROUNDS = 3  # rounds per workload, every client taking its turn in each; the best is kept
BIG_ROUNDS = 4  # rounds of the 64 MiB workloads (one transfer each; the first pays for warm-up)
ECHO_CHUNK = CHUNK_BYTES  # the raw stream's messages are the size of ReadFile's and output's

Timing = Callable[[], Awaitable[float]]
"""Seconds per operation for one workload on one client (lower is better)."""


async def _per_call(call: Callable[[], Awaitable[object]], rounds: int = CALLS) -> float:
    return await _median_call(call, rounds)


async def _concurrent(call: Callable[[], Awaitable[object]]) -> float:
    """Seconds per command with :data:`CONCURRENCY` of them in flight (1 / throughput)."""
    await call()

    async def slot() -> None:
        for _ in range(CONCURRENT_ROUNDS):
            await call()

    start = time.perf_counter()
    await asyncio.gather(*(slot() for _ in range(CONCURRENCY)))
    return (time.perf_counter() - start) / (CONCURRENCY * CONCURRENT_ROUNDS)


async def _once(call: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await call()
    return time.perf_counter() - start


async def _process(argv: list[str], stdin: bytes | None = None) -> None:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    await proc.communicate(stdin)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[-1][:40]!r} exited with {proc.returncode}")


async def _process_output(argv: list[str], size: int, *, whole: bool) -> None:
    """Run ``argv`` and take its ``size`` bytes of output into this process, as a client takes
    what it asked for: ``whole``, as one ``bytes`` (a file read, as ``read_file`` returns it),
    else piece by piece as they come (command output, as ``exec`` hands it to ``on_data``).

    The output comes through a pipe of :data:`OUTPUT_READ_BYTES`, read by blocking reads of
    that size in a thread: the cheapest way for Python to take a child's output (asyncio's pipe
    transport reads 256 KiB at a time through a ``StreamReader``, and costs OpenSSH more than
    half its throughput here)."""
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    try:
        fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, OUTPUT_READ_BYTES)
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=subprocess.DEVNULL, stdout=write_fd
        )
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)

    def receive() -> int:
        with open(read_fd, "rb", buffering=0) as pipe:
            if whole:
                return len(b"".join(iter(functools.partial(pipe.read, OUTPUT_READ_BYTES), b"")))
            received = 0
            while chunk := pipe.read(OUTPUT_READ_BYTES):
                received += len(chunk)
            return received

    received = await asyncio.to_thread(receive)
    await proc.wait()
    if proc.returncode != 0 or received != size:
        raise RuntimeError(f"{argv[-1][:40]!r} exited with {proc.returncode}, {received} bytes")


def _backend_workloads(backend: Backend, root: Path) -> dict[str, Timing]:
    big, small, data4k = str(root / "big"), str(root / "file4k"), os.urandom(4096)
    data = (root / "big").read_bytes()
    counted = 0

    def count(chunk: bytes) -> None:
        nonlocal counted
        counted += len(chunk)

    async def output() -> None:
        nonlocal counted
        counted = 0
        await backend.exec(f"head -c {BIG} /dev/zero", str(root), on_data=count)
        assert counted == BIG, counted

    def true() -> Awaitable[object]:
        return backend.exec("true", str(root), on_data=lambda _: None)

    return {
        "exec true": lambda: _per_call(true),
        f"{CONCURRENCY} concurrent exec true": lambda: _concurrent(true),
        "read 4 KiB": lambda: _per_call(lambda: backend.read_file(small)),
        "write 4 KiB": lambda: _per_call(lambda: backend.write_file(str(root / "w4k"), data4k)),
        "read 64 MiB": lambda: _once(lambda: backend.read_file(big)),
        "write 64 MiB": lambda: _once(lambda: backend.write_file(str(root / "w64"), data)),
        "64 MiB command output": lambda: _once(output),
    }


def _asyncssh_workloads(
    conn: asyncssh.SSHClientConnection, sftp: asyncssh.SFTPClient, root: Path
) -> dict[str, Timing]:
    big, small, data4k = str(root / "big"), str(root / "file4k"), os.urandom(4096)
    data = (root / "big").read_bytes()

    async def true() -> None:
        await conn.run("true", check=True)

    async def read(path: str) -> None:
        async with sftp.open(path, "rb") as f:
            await f.read()

    async def write(path: str, content: bytes) -> None:
        async with sftp.open(path, "wb") as f:
            await f.write(content)

    async def output() -> None:
        result = await conn.run(f"head -c {BIG} /dev/zero", encoding=None, check=True)
        assert len(result.stdout or b"") == BIG

    return {
        "exec true": lambda: _per_call(true),
        f"{CONCURRENCY} concurrent exec true": lambda: _concurrent(true),
        "read 4 KiB": lambda: _per_call(lambda: read(small)),
        "write 4 KiB": lambda: _per_call(lambda: write(str(root / "a4k"), data4k)),
        "read 64 MiB": lambda: _once(lambda: read(big)),
        "write 64 MiB": lambda: _once(lambda: write(str(root / "a64"), data)),
        "64 MiB command output": lambda: _once(output),
    }


def _openssh_workloads(ssh: list[str], root: Path) -> dict[str, Timing]:
    big, small, data4k = root / "big", root / "file4k", os.urandom(4096)
    data = big.read_bytes()

    def true() -> Awaitable[None]:
        return _process([*ssh, "true"])

    return {
        "exec true": lambda: _per_call(true, OPENSSH_CALLS),
        f"{CONCURRENCY} concurrent exec true": lambda: _concurrent(true),
        "read 4 KiB": lambda: _per_call(
            lambda: _process_output([*ssh, f"cat {small}"], 4096, whole=True), OPENSSH_CALLS
        ),
        "write 4 KiB": lambda: _per_call(
            lambda: _process([*ssh, f"cat > {root / 'o4k'}"], data4k), OPENSSH_CALLS
        ),
        "read 64 MiB": lambda: _once(
            lambda: _process_output([*ssh, f"cat {big}"], BIG, whole=True)
        ),
        "write 64 MiB": lambda: _once(lambda: _process([*ssh, f"cat > {root / 'o64'}"], data)),
        "64 MiB command output": lambda: _once(
            lambda: _process_output([*ssh, f"head -c {BIG} /dev/zero"], BIG, whole=False)
        ),
    }


@contextlib.asynccontextmanager
async def _swerex(tmp: Path) -> AsyncIterator[Any]:
    """A SWE-ReX server (``swerex.server``, uvicorn) on loopback and its ``RemoteRuntime``
    client; None, said on stdout, when swe-rex is not installed or its server does not start."""
    try:
        from swerex.runtime.remote import RemoteRuntime
    except ImportError as e:
        print(f"peer SWE-ReX: cannot start ({e}; pip install -e '.[bench]'); left out", flush=True)
        yield None
        return
    port, token = _free_port(), os.urandom(16).hex()
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "swerex.server", "--host", "127.0.0.1", "--port", str(port),
        "--auth-token", token, cwd=tmp, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        runtime = RemoteRuntime(host="http://127.0.0.1", port=port, auth_token=token)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (await runtime.is_alive()).is_alive:
            if server.returncode is not None or time.monotonic() > deadline:
                print("peer SWE-ReX: its server did not start; left out", flush=True)
                yield None
                return
            await asyncio.sleep(0.1)
        yield runtime
    finally:
        if server.returncode is None:
            server.terminate()
        await asyncio.wait_for(server.wait(), 20)


def _swerex_workloads(runtime: Any, root: Path) -> dict[str, Timing]:
    """SWE-ReX carries file content and output as JSON strings, so its files are ASCII text of
    the same sizes (random bytes would be escaped and grow) and its 64 MiB of output are
    ``x`` characters rather than NUL bytes, which JSON writes as six bytes each. Its commands
    run in bash, as everyone else's."""
    from swerex.runtime.abstract import Command, ReadFileRequest, WriteFileRequest

    text4k, text = "a" * 4096, "a" * BIG
    (root / "text4k").write_text(text4k)
    (root / "bigtext").write_text(text)

    async def run(command: str) -> str:
        # bash, as every other client here runs (SWE-ReX's shell=True would start dash).
        argv = ["bash", "-c", command]
        response = await runtime.execute(Command(command=argv, check=True))
        return str(response.stdout)

    async def read(name: str, size: int) -> None:
        response = await runtime.read_file(ReadFileRequest(path=str(root / name)))
        assert len(response.content) == size

    def write(name: str, content: str) -> Awaitable[object]:
        return runtime.write_file(WriteFileRequest(path=str(root / name), content=content))

    async def output() -> None:
        assert len(await run(f"head -c {BIG} /dev/zero | tr '\\0' x")) == BIG

    return {
        "exec true": lambda: _per_call(lambda: run("true")),
        f"{CONCURRENCY} concurrent exec true": lambda: _concurrent(lambda: run("true")),
        "read 4 KiB": lambda: _per_call(lambda: read("text4k", 4096)),
        "write 4 KiB": lambda: _per_call(lambda: write("s4k", text4k)),
        "read 64 MiB": lambda: _once(lambda: read("bigtext", BIG)),
        "write 64 MiB": lambda: _once(lambda: write("s64", text)),
        "64 MiB command output": lambda: _once(output),
    }


def _local_workloads() -> dict[str, Timing]:
    def true() -> Awaitable[None]:
        return _process(["bash", "-c", "true"])

    return {
        "exec true": lambda: _per_call(true),
        f"{CONCURRENCY} concurrent exec true": lambda: _concurrent(true),
    }


@contextlib.asynccontextmanager
async def _echo_floor() -> AsyncIterator[dict[str, Timing]]:
    """A bare grpc.aio server on loopback in its own process (``scripts/_floor_servers.py``), the
    floor of our gRPC figures: its unary round trip; a 64 MiB stream of :data:`ECHO_CHUNK`
    messages, discarded (as command output is counted) and assembled into one ``bytes`` (as a
    read must return it); and the stream of 64 MiB of the same command's output as our exec,
    read from its pipe (the prepared stream has no producer to pay for)."""
    import grpc.aio

    async with (
        _floor_servers() as (_, ports),
        grpc.aio.insecure_channel(f"127.0.0.1:{ports['grpc']}") as channel,
    ):
        unary = channel.unary_unary("/bench.Floor/Echo")
        streamed = channel.unary_stream("/bench.Floor/Stream")
        output = channel.unary_stream("/bench.Floor/Output")

        async def read_all(keep: bool) -> None:
            content = io.BytesIO()
            call = streamed(f"{BIG // ECHO_CHUNK} {ECHO_CHUNK}".encode())
            while (piece := await call.read()) is not grpc.aio.EOF:
                if keep:
                    content.write(piece)
            assert not keep or len(content.getvalue()) == BIG

        async def output_all() -> None:
            call = output(str(BIG).encode())
            seen = 0
            while (piece := await call.read()) is not grpc.aio.EOF:
                seen += len(piece)
            assert seen == BIG, seen

        yield {
            "echo round trip": lambda: _per_call(lambda: unary(b"x" * 64)),
            "64 MiB echo stream": lambda: _once(lambda: read_all(False)),
            "64 MiB echo stream, assembled": lambda: _once(lambda: read_all(True)),
            "64 MiB command output stream": lambda: _once(output_all),
        }


async def _alternate(clients: dict[str, dict[str, Timing]]) -> dict[str, dict[str, float]]:
    """Every workload of every client, in rounds (:data:`PEER_ROUNDS`, :data:`BIG_ROUNDS` for
    64 MiB): in each round every client takes its turn, in an order rotated from round to
    round, so that the machine's drift meets them alike; each client's best round is kept. A
    client that cannot run a workload says so and is left out of that workload."""
    best: dict[str, dict[str, float]] = {name: {} for name in clients}
    workloads = list(dict.fromkeys(w for timings in clients.values() for w in timings))
    for workload in workloads:
        runners = [name for name, timings in clients.items() if workload in timings]
        failed: set[str] = set()
        for turn in range(BIG_ROUNDS if "64 MiB" in workload else PEER_ROUNDS):
            shift = turn % len(runners)
            for name in runners[shift:] + runners[:shift]:
                if name in failed:
                    continue
                try:
                    seconds = await clients[name][workload]()
                except Exception as e:  # any client's failure (aiohttp's too): said, left out
                    print(f"peer {name}: cannot run {workload} ({type(e).__name__}: {e})")
                    failed.add(name)
                    best[name].pop(workload, None)
                    continue
                best[name][workload] = min(best[name].get(workload, seconds), seconds)
    return best


def _fmt(workload: str, seconds: float) -> str:
    if "64 MiB" in workload:
        return f"{BIG / seconds / 1e6:.0f} MB/s"
    if "concurrent" in workload:
        return f"{1 / seconds:.0f}/s"
    return _ms(seconds)


@benchmark
def peers() -> None:
    """Every workload over gRPC and SSH beside asyncssh (one connection: exec channels and one
    SFTP session) and OpenSSH (ControlMaster) on a private sshd, and local ``bash -c true``.

    SWE-ReX (its uvicorn server and ``RemoteRuntime`` client) runs beside them when swe-rex is
    installed (``pip install -e '.[bench]'``). Every client takes its turn in each round of each
    workload (:func:`_alternate`). Each line: our figure, each peer's, and the ratio of our time
    to the best peer's (below 1 is ahead; the goal is 0.9 or less). Then gRPC against the bare
    grpc.aio floor and exec against local bash.
    """

    async def run() -> None:
        async with _rig() as rig, contextlib.AsyncExitStack() as stack:
            clients = {
                "gRPC": _backend_workloads(rig.grpc_backend, rig.root),
                "SSH": _backend_workloads(rig.ssh_backend, rig.root),
            }
            if rig.sshd_port:
                keys = rig.tmp / "keys"
                try:
                    conn = await asyncssh.connect(
                        "127.0.0.1", rig.sshd_port, username=os.environ.get("USER") or "root",
                        client_keys=[str(keys / "client")],
                        known_hosts=str(rig.tmp / "sshd_known_hosts"), env={"SHLVL": "1"},
                    )  # fmt: skip
                except (OSError, asyncssh.Error) as e:
                    print(f"peer asyncssh: cannot connect ({e}); left out", flush=True)
                else:
                    await stack.enter_async_context(conn)
                    sftp = await stack.enter_async_context(conn.start_sftp_client())
                    clients["asyncssh"] = _asyncssh_workloads(conn, sftp, rig.root)
                clients["OpenSSH mux"] = _openssh_workloads(rig.openssh, rig.root)
            runtime = await stack.enter_async_context(_swerex(rig.tmp))
            if runtime is not None:
                clients["SWE-ReX"] = _swerex_workloads(runtime, rig.root)
            clients["local bash"] = _local_workloads()
            clients["grpc.aio"] = await stack.enter_async_context(_echo_floor())
            measured = await _alternate(clients)
        ours = {transport: measured[transport] for transport in ("gRPC", "SSH")}
        peers = {n: measured[n] for n in ("asyncssh", "OpenSSH mux", "SWE-ReX") if n in measured}
        local, raw = measured["local bash"], measured["grpc.aio"]
        for workload in ours["gRPC"]:
            theirs = {n: f[workload] for n, f in peers.items() if workload in f}
            best = min(theirs, key=theirs.__getitem__) if theirs else None
            for transport, figures in ours.items():
                if workload not in figures:
                    continue
                mine = figures[workload]
                parts = [f"{n} {_fmt(workload, t)}" for n, t in theirs.items()]
                ratio = (
                    f" = {mine / theirs[best]:.2f}x of {best}'s time" if best else ", no peer ran"
                )
                print(
                    f"peers {workload} [{transport}]: ours {_fmt(workload, mine)}; "
                    + ", ".join(parts) + ratio, flush=True,
                )  # fmt: skip
        for transport, figures in ours.items():
            for workload, floor in local.items():
                if workload in figures:
                    print(
                        f"peers {workload} [{transport}] vs local bash -c true: ours "
                        f"{_fmt(workload, figures[workload])}, local {_fmt(workload, floor)} = "
                        f"{floor / figures[workload]:.0%} of local (goal >= 80% concurrent)",
                        flush=True,
                    )
        grpc = ours["gRPC"]
        floor = (
            "echo round trip", "64 MiB echo stream", "64 MiB echo stream, assembled",
            "64 MiB command output stream",
        )  # fmt: skip
        used = ("read 4 KiB", "exec true", "read 64 MiB", "64 MiB command output")
        if all(k in raw for k in floor) and all(k in grpc for k in used):
            rtt, stream, assembled, bare_output = (raw[k] for k in floor)
            output = grpc["64 MiB command output"]
            print(
                f"peers gRPC floor: echo round trip {_ms(rtt)} (read 4 KiB "
                f"{grpc['read 4 KiB'] / rtt:.2f}x of it, exec true {grpc['exec true'] / rtt:.2f}x); "
                f"echo stream {_fmt('64 MiB', stream)}, assembled {_fmt('64 MiB', assembled)}: "
                f"read 64 MiB at {stream / grpc['read 64 MiB']:.0%} of the stream "
                f"({assembled / grpc['read 64 MiB']:.0%} of it assembled), command output at "
                f"{stream / output:.0%} of it and {bare_output / output:.0%} of the bare stream "
                f"of the same command's output ({_fmt('64 MiB', bare_output)}) (goal >= 70%)",
                flush=True,
            )

    asyncio.run(run())


# --- how cost grows ------------------------------------------------------------------------------

RUNNING = (1, 16, 64, 256)  # commands already running when exec latency is measured
IDLE_CONNECTIONS = 64  # extra connections opened to measure the broker's memory per connection
GROWTH_CALLS = 50
GROWTH_ROUNDS = 3  # rounds of every size of RUNNING, in rotated order (cost_growth)
SETTLE_S = 0.5  # after opening connections, before reading the broker's RSS (its threads settle)


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def _sockets(pid: int) -> int:
    """How many sockets the broker holds: one more per connection a client really opened."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    return count


@contextlib.asynccontextmanager
async def _idle_grpc(rig: Rig, n: int) -> AsyncIterator[None]:
    """``n`` gRPC channels, each on a TCP connection of its own, each authenticated by one call.

    grpc shares one subchannel (one TCP connection) among the channels of a process that have
    the same target and arguments, so :func:`connect` called ``n`` times opens *one* connection:
    the broker then sees a single client. A local subchannel pool per channel gives each its own.
    """
    import grpc.aio
    from opsbroker.v1 import broker_pb2 as pb
    from opsbroker.v1 import broker_pb2_grpc as pb_grpc

    target = rig.grpc_url.removeprefix("grpc://")
    channels = [
        grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(n)
    ]
    try:
        for channel in channels:
            stub = pb_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
            await stub.Capabilities(
                pb.CapabilitiesRequest(), metadata=(("authorization", f"Bearer {rig.token}"),)
            )
        yield
    finally:
        for channel in channels:
            await channel.close()


@contextlib.asynccontextmanager
async def _idle_ssh(rig: Rig, n: int) -> AsyncIterator[None]:
    """``n`` SSH connections to the broker, each authenticated, with no channel open."""
    host, port = rig.ssh_addr.rsplit(":", 1)
    keys = rig.tmp / "keys"
    conns = []
    try:
        for _ in range(n):
            conn = await asyncssh.connect(
                host, int(port), username="bench", client_keys=[str(keys / "client")],
                known_hosts=str(rig.tmp / "broker_known_hosts"),
            )  # fmt: skip
            conns.append(conn)
        yield
    finally:
        for conn in conns:
            conn.close()
            await conn.wait_closed()


async def _per_connection(
    rig: Rig, opened: Callable[[Rig, int], contextlib.AbstractAsyncContextManager[None]]
) -> tuple[float, int]:
    """The broker's RSS growth per idle connection, and how many sockets it gained for them.

    Two batches of :data:`IDLE_CONNECTIONS` are opened and the second one's growth is the
    figure: the first may partly fit in heap the broker had already freed (a first batch alone
    reads low, down to 0), the second pays for its own memory.
    """
    pid = rig.broker_pid
    sockets = _sockets(pid)
    async with opened(rig, IDLE_CONNECTIONS):
        await asyncio.sleep(SETTLE_S)
        before = _rss(pid)
        async with opened(rig, IDLE_CONNECTIONS):
            await asyncio.sleep(SETTLE_S)
            per = (_rss(pid) - before) / IDLE_CONNECTIONS
            gained = _sockets(pid) - sockets
    for _ in range(int(START_TIMEOUT_S / 0.05)):  # the broker closes its ends a moment later
        if _sockets(pid) <= sockets:
            break
        await asyncio.sleep(0.05)
    return per, gained


def _plot(
    name: str, title: str, x_label: str, series: dict[str, list[tuple[float, float]]]
) -> None:
    """Write ``series`` (milliseconds against a count) to ``$BENCH_PLOT_DIR/<name>.svg`` when
    that variable names a directory (``BENCH_PLOT_DIR=docs`` refreshes the plots of the docs)."""
    folder = os.environ.get("BENCH_PLOT_DIR")
    if not folder:
        return
    from _svgplot import line_chart

    path = Path(folder) / f"{name}.svg"
    line_chart(path, title, x_label, "milliseconds (median)", series)
    print(f"{name}: plot written to {path}", flush=True)


@benchmark
def cost_growth() -> None:
    """``exec true`` latency over gRPC and SSH with 1-256 commands already running in the broker,
    and the broker's RSS per running command and per idle gRPC and SSH connection, as a table.

    The sizes take turns: :data:`GROWTH_ROUNDS` rounds, each running every size in an order
    rotated from round to round, and each figure is the best round's median (as :func:`peers`
    keeps each client's best round), so that the machine's drift over the minutes of a run
    does not pass for growth; each is taken once the start of the running commands has settled
    (after as many untimed execs). The memory figures are RSS deltas of the broker process, of
    the first round; connections are measured first, on a broker that has not yet served the
    running commands (whose freed heap would absorb them).
    """
    from operations import AbortController

    async def at(rig: Rig, n: int) -> tuple[float, float, float]:
        """With ``n`` commands running: exec latency over gRPC and SSH, RSS per command."""
        root, pid = str(rig.root), rig.broker_pid
        controllers = [AbortController() for _ in range(n)]
        before = _rss(pid)
        tasks = [
            asyncio.create_task(
                rig.grpc_backend.exec("sleep 600", root, on_data=lambda _: None, signal=c.signal)
            )
            for c in controllers
        ]
        try:
            for _ in range(int(START_TIMEOUT_S / 0.05)):  # until every command runs
                if len(_children(pid)) >= n:
                    break
                await asyncio.sleep(0.05)
            per_command = (_rss(pid) - before) / n
            latencies = []
            for backend in (rig.grpc_backend, rig.ssh_backend):

                def true(b: Backend = backend) -> Awaitable[object]:
                    return b.exec("true", root, on_data=lambda _: None)

                await _median_call(true, GROWTH_CALLS)  # the start of the commands settles
                latencies.append(await _median_call(true, GROWTH_CALLS))
            grpc, ssh = latencies
        finally:
            for c in controllers:
                c.abort()
            await asyncio.gather(*tasks, return_exceptions=True)
        return grpc, ssh, per_command

    async def run() -> None:
        async with _rig() as rig:
            per_grpc, grpc_sockets = await _per_connection(rig, _idle_grpc)
            per_ssh, ssh_sockets = await _per_connection(rig, _idle_ssh)
            figures: dict[int, list[tuple[float, float, float]]] = {n: [] for n in RUNNING}
            for turn in range(GROWTH_ROUNDS):
                shift = turn % len(RUNNING)
                for n in RUNNING[shift:] + RUNNING[:shift]:
                    figures[n].append(await at(rig, n))
        rows = [
            (
                n,
                min(f[0] for f in found),
                min(f[1] for f in found),
                found[0][2],  # the first round runs the sizes in ascending order: a heap only
            )  # the smaller sizes grew, where later rounds reuse what 256 commands freed
            for n, found in figures.items()
        ]
        print("cost_growth: exec true (median) with N commands already running", flush=True)
        print("| running | gRPC | SSH | broker RSS per running command |")
        print("|---:|---:|---:|---:|")
        base = rows[0]
        for n, grpc, ssh, per in rows:
            print(
                f"| {n} | {_ms(grpc)} ({grpc / base[1]:.2f}x) | {_ms(ssh)} ({ssh / base[2]:.2f}x)"
                f" | {per / 1024:.0f} KiB |"
            )
        _plot(
            "cost-growth",
            "exec true with N commands already running",
            "commands already running in the broker",
            {
                name: [(row[0], row[column] * 1e3) for row in rows]
                for column, name in ((1, "gRPC"), (2, "SSH"))
            },
        )
        print(
            f"cost_growth: broker RSS per idle connection: gRPC {per_grpc / 1024:.0f} KiB "
            f"(the second {IDLE_CONNECTIONS} channels of {grpc_sockets}, one socket each), SSH "
            f"{per_ssh / 1024:.0f} KiB (the second {IDLE_CONNECTIONS} connections of {ssh_sockets})",
            flush=True,
        )

    asyncio.run(run())


TREE_SIZES = (10_000, 100_000, 1_000_000)  # files in the tree read and searched
TREE_FANOUT = 1000  # files per directory (directories are two levels deep)
TREE_BUILD_BUDGET_S = 240.0  # a size whose build would pass this (at the rate so far) is cut
TREE_CALLS = 100  # reads per figure
TREE_SEARCHES = 3  # searches per figure (the median is kept)
NEEDLE = "opsbroker-needle"


def _grow_tree(base: Path, have: int, want: int) -> None:
    """Files ``have .. want-1`` of the tree, ``dA/dB/fC``: in each directory, one file of two
    lines and hard links to it (a link costs the file system a sixth of a new file with data, and
    every path is still opened and read by a search); the last file is a file of its own holding
    :data:`NEEDLE`, the one match of the search."""
    for i in range(have, want):
        path = _tree_file(base, i)
        if i % TREE_FANOUT == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"line one of {i}\nline two\n")
        else:
            os.link(_tree_file(base, i - i % TREE_FANOUT), path)
    if have:  # the previous needle is no longer the last file: one match per tree
        _tree_file(base, have - 1).unlink()
        os.link(_tree_file(base, have - have % TREE_FANOUT), _tree_file(base, have - 1))
    needle = _tree_file(base, want - 1)
    needle.unlink()
    needle.write_text(f"line one of {want - 1}\n{NEEDLE}\n")


def _tree_file(base: Path, i: int) -> Path:
    return base / f"d{i // TREE_FANOUT**2:03d}" / f"d{i // TREE_FANOUT:05d}" / f"f{i:07d}"


@benchmark
def tree_growth() -> None:
    """Read (4 KiB, median) and search (one match, median) latency over gRPC and SSH with a tree
    of 10k, 100k and 1M files in the root; search beside ``rg`` run directly on the same tree.

    The tree is built once, growing from one size to the next; a size whose build would not fit
    :data:`TREE_BUILD_BUDGET_S` at the rate measured so far is cut, and the line says so.
    """

    assert all(size % TREE_FANOUT == 0 for size in TREE_SIZES)  # whole directories

    async def run() -> None:
        async with _rig() as rig:
            base, small = rig.root / "tree", str(rig.root / "file4k")
            rg = shutil.which("rg") or str(Path(sys.executable).parent / "rg")
            have, built_s, rows = 0, 0.0, []
            for size in TREE_SIZES:
                if have and built_s / have * (size - have) > TREE_BUILD_BUDGET_S - built_s:
                    print(
                        f"tree_growth: {size} files cut: building them would take about "
                        f"{built_s / have * size:.0f} s (budget {TREE_BUILD_BUDGET_S:.0f} s)",
                        flush=True,
                    )
                    break
                start = time.perf_counter()
                await asyncio.to_thread(_grow_tree, base, have, size)
                built_s += time.perf_counter() - start
                have = size
                cells = []
                for backend in (rig.grpc_backend, rig.ssh_backend):

                    async def search(b: Backend = backend) -> None:
                        found = [m async for m in b.search(NEEDLE, str(base), literal=True)]
                        assert len(found) == 1, found

                    cells.append(
                        await _median_call(lambda b=backend: b.read_file(small), TREE_CALLS)
                    )
                    cells.append(await _median_call(search, TREE_SEARCHES))
                local = (
                    await _median_process(
                        [rg, "-F", "--no-config", NEEDLE, str(base)], TREE_SEARCHES
                    )
                    if os.path.exists(rg)  # noqa: ASYNC240 (set-up)
                    else float("nan")
                )
                rows.append((size, *cells, local))
        print("tree_growth: median read 4 KiB and search (one match) with N files in the root")
        print("| files | read gRPC | read SSH | search gRPC | search SSH | rg alone |")
        print("|---:|---:|---:|---:|---:|---:|")
        first = rows[0]
        for size, rd_g, se_g, rd_s, se_s, local in rows:
            print(
                f"| {size} | {_ms(rd_g)} ({rd_g / first[1]:.2f}x) | {_ms(rd_s)} "
                f"({rd_s / first[3]:.2f}x) | {_ms(se_g)} ({se_g / local:.2f}x of rg) | "
                f"{_ms(se_s)} ({se_s / local:.2f}x of rg) | {_ms(local)} |",
                flush=True,
            )
        for name, title, columns in (
            (
                "tree-search",
                "search (one match) with N files",
                ((2, "gRPC"), (4, "SSH"), (5, "rg alone")),
            ),
            ("tree-read", "read 4 KiB with N files in the root", ((1, "gRPC"), (3, "SSH"))),
        ):
            _plot(
                name,
                title,
                "files in the root",
                {label: [(row[0], row[c] * 1e3) for row in rows] for c, label in columns},
            )

    asyncio.run(run())


CPU_CALLS = 300  # sequential execs per CPU figure
CPU_ROUNDS = 3  # rounds of CPU_CALLS per figure; the cheapest is kept (_cpu_of)
CPU_GOAL_S = 0.7e-3  # broker CPU per exec("true") to reach (issue 20)
COLD_PAUSE_S = 2e-3  # idle between execs for the core's cold figure: a client's round trip


def _thread_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds the process's live threads have run (``schedstat``: ns, not clock ticks):
    all of them, and its main thread (the event loop's) alone."""
    total = main = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/schedstat") as f:
            ns = int(f.read().split()[0])
            total += ns
            if task == str(pid):
                main = ns
    return total / 1e9, main / 1e9


def _reaped_cpu(pid: int) -> float:
    """CPU seconds of the process's reaped children (``cutime + cstime``): the commands' shells."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


@dataclass
class _Cpu:
    """CPU seconds per command of the broker, its shells and the client, over one workload."""

    broker: float
    shells: float
    client: float
    wall: float
    threads: float = 0.0  # the broker's CPU outside its main thread (grpc's own threads)
    median: float = 0.0  # the broker's CPU in the median round (:func:`_cpu_of`)

    @property
    def total(self) -> float:
        return self.broker + self.shells + self.client


async def _cpu_of(pid: int, workload: Callable[[], Awaitable[object]], n: int) -> _Cpu:
    """Run ``workload`` (``n`` commands) once to warm up (channels, cgroups), then
    :data:`CPU_ROUNDS` times, and split the CPU of the round that cost process ``pid`` least
    by process. A shared machine's neighbours only ever add CPU (caches, the other thread of a
    core), so the least is the nearest to the cost itself, as ``timeit`` reports;
    :attr:`_Cpu.median` keeps the median round's figure for ``pid`` beside it."""
    await workload()
    measured = []

    def snapshot() -> tuple[float, ...]:
        return (*_thread_cpu(pid), _reaped_cpu(pid), time.process_time(), time.perf_counter())

    for _ in range(CPU_ROUNDS):
        cpu = snapshot()
        await workload()
        after = snapshot()
        broker, loop, shells, client, wall = ((b - a) / n for a, b in zip(cpu, after, strict=True))
        measured.append(_Cpu(broker, shells, client, wall, threads=broker - loop))
    best = min(measured, key=lambda m: m.broker)
    return replace(best, median=statistics.median(m.broker for m in measured))


async def _core_cpu(n: int, pause: float = 0.0) -> float:
    """CPU seconds per ``exec("true")`` of the broker core embedded in this process (no
    transport; the shells are children, counted apart by the kernel), with ``pause`` seconds of
    idling between execs: a broker between requests is idle, and the same code costs more CPU
    when it runs cold (caches and predictors filled by others meanwhile). The cheapest of
    :data:`CPU_ROUNDS` rounds, as :func:`_cpu_of`."""
    from broker import Broker

    with tempfile.TemporaryDirectory(prefix="opsbroker-bench-") as root:
        async with Broker(root) as core:
            for _ in range(20):
                await core.exec("true", root, on_data=lambda _: None)
            rounds = []
            for _ in range(CPU_ROUNDS):
                spent = 0.0
                for _ in range(n):
                    if pause:
                        await asyncio.sleep(pause)
                    start = time.process_time()
                    await core.exec("true", root, on_data=lambda _: None)
                    spent += time.process_time() - start
                rounds.append(spent / n)
            return min(rounds)


async def _transport_floor(n: int, event_loop: str) -> tuple[float, float, float, float]:
    """Server CPU seconds per call of a bare grpc.aio server (a server-streaming call that writes
    one small message; a unary call; a message pair on one open bidirectional stream) and of a
    bare asyncssh server (one small reply to one small message on an open channel): what each
    transport costs before any code of ours runs (:func:`_floor_servers`)."""
    import grpc.aio

    async with _floor_servers(event_loop) as (pid, ports):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['grpc']}") as channel:
            run = channel.unary_stream("/bench.Floor/Run")

            async def grpc_call() -> None:
                async for _ in run(b""):
                    pass

            grpc_cpu = await _server_cpu(pid, grpc_call, n)
            unary = channel.unary_unary("/bench.Floor/Echo")
            unary_cpu = await _server_cpu(pid, lambda: unary(b""), n)
            pair_cpu = await _pair_cpu(channel, pid, n)
            gc.collect()  # an ended call left to the collector keeps its connection open
        async with asyncssh.connect(
            "127.0.0.1", ports["ssh"], username="bench", known_hosts=None,
            encryption_algs=["aes128-gcm@openssh.com"], client_keys=None, agent_path=None,
        ) as conn:  # fmt: skip
            replies: asyncio.Queue[bytes] = asyncio.Queue()

            class Session(asyncssh.SSHClientSession[bytes]):
                def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
                    replies.put_nowait(data)

            chan, _ = await conn.create_session(Session, subsystem="floor", encoding=None)

            async def ssh_call() -> None:
                chan.write(b"x" * 64)
                await replies.get()

            ssh_cpu = await _server_cpu(pid, ssh_call, n)
            chan.close()
        return grpc_cpu, unary_cpu, pair_cpu, ssh_cpu


async def _pair_cpu(channel: Any, pid: int, n: int) -> float:
    """Server CPU seconds per message pair on one open bidirectional stream of ``channel``."""
    pairs = channel.stream_stream("/bench.Floor/Pairs")()

    async def pair() -> None:
        await pairs.write(b"")
        await pairs.read()

    try:
        return await _server_cpu(pid, pair, n)
    finally:
        await pairs.done_writing()
        await pairs.code()


@contextlib.asynccontextmanager
async def _floor_servers(event_loop: str = "uvloop") -> AsyncIterator[tuple[int, dict[str, int]]]:
    """``scripts/_floor_servers.py`` in a child process, on ``event_loop`` as the broker: (its
    pid, its ports by transport)."""
    server = await asyncio.create_subprocess_exec(
        sys.executable, str(HERE / "scripts" / "_floor_servers.py"),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        env={**os.environ, eventloop.ENV_VAR: event_loop},
    )  # fmt: skip
    assert server.stdin is not None and server.stdout is not None
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            lines = [(await server.stdout.readline()).decode().split() for _ in range(2)]
        if not all(len(line) == 2 for line in lines):
            raise RuntimeError("the floor servers did not start (see their error above)")
        yield server.pid, {name: int(port) for name, port in lines}
    finally:
        server.stdin.close()
        try:
            await asyncio.wait_for(server.wait(), 10)
        except TimeoutError:
            server.kill()
            await server.wait()


async def _server_cpu(pid: int, call: Callable[[], Awaitable[object]], n: int) -> float:
    """Thread CPU seconds of process ``pid`` per ``call``, over ``n`` calls (:func:`_cpu_of`)."""

    async def calls() -> None:
        for _ in range(n):
            await call()

    return (await _cpu_of(pid, calls, n)).broker


def _on_loop(event_loop: str, main: Coroutine[Any, Any, float]) -> float:
    """Run ``main`` on a new ``event_loop`` (``opsbroker.eventloop``) of its own."""
    with asyncio.Runner(loop_factory=eventloop.loop_factory(event_loop)) as runner:
        return runner.run(main)


@benchmark
def exec_cpu() -> None:
    """Broker CPU per ``exec("true")`` over gRPC and SSH (its own threads, without the shells,
    which are reaped children), beside the shells' and the client's; then the same split with
    16 commands in flight, against 16 local ``bash -c true`` started by this process. The broker
    runs on uvloop, as ``opsbroker serve`` does, and then on asyncio's own loop: the last line
    is the ratio of the two.

    On a 2-core machine 16 commands in flight keep both cores busy, so their throughput is set
    by the CPU each command costs in all processes together: the CPU ratio to local bash is the
    ceiling of the throughput ratio.
    """
    cores = {name: _on_loop(name, _core_cpu(CPU_CALLS)) for name in eventloop.LOOPS}
    colds = {name: _on_loop(name, _core_cpu(CPU_CALLS, COLD_PAUSE_S)) for name in eventloop.LOOPS}

    async def run() -> None:
        broker: dict[tuple[str, str], float] = {}
        for event_loop in eventloop.LOOPS:
            core = cores[event_loop]
            grpc_floor, unary_floor, pair_floor, ssh_floor = await _transport_floor(
                CPU_CALLS, event_loop
            )
            # The gRPC client runs exec on pooled Frames streams: its bare transport is a
            # message pair on an open stream (a streaming call per exec, as a Run RPC, beside).
            floor = {"gRPC": pair_floor, "SSH": ssh_floor}
            print(
                f"exec_cpu floor [{event_loop}]: broker core {_ms(core)} per exec in process "
                f"(no transport), {_ms(colds[event_loop])} with {COLD_PAUSE_S * 1e3:g} ms idle "
                f"between execs; bare grpc.aio server {_ms(pair_floor)} per message pair on one "
                f"open stream ({_ms(grpc_floor)} per one-message streaming call, "
                f"{_ms(unary_floor)} per unary call); bare asyncssh server {_ms(ssh_floor)} per "
                "message round trip on an open channel",
                flush=True,
            )
            async with _rig(event_loop) as rig:
                root, pid = str(rig.root), rig.broker_pid
                for name, backend in (("gRPC", rig.grpc_backend), ("SSH", rig.ssh_backend)):

                    async def true(b: Backend = backend, cwd: str = root) -> None:
                        await b.exec("true", cwd, on_data=lambda _: None)

                    async def sequential() -> None:
                        for _ in range(CPU_CALLS):
                            await true()

                    async def concurrent() -> None:
                        await _concurrent(true)

                    one = await _cpu_of(pid, sequential, CPU_CALLS)
                    broker[name, event_loop] = one.broker
                    print(
                        f"exec_cpu exec true [{name}, {event_loop}]: broker {_ms(one.broker)} "
                        f"per exec ({one.broker / CPU_GOAL_S:.2f}x of the {_ms(CPU_GOAL_S)} "
                        f"goal; median round {_ms(one.median)}) = core {_ms(core)} + bare "
                        f"transport {_ms(floor[name])} + the rest "
                        f"{_ms(one.broker - core - floor[name])}; of it outside the event "
                        f"loop's thread {_ms(one.threads)}; shells {_ms(one.shells)}, "
                        f"client {_ms(one.client)}, wall {_ms(one.wall)}",
                        flush=True,
                    )
                    many = await _cpu_of(pid, concurrent, CONCURRENCY * CONCURRENT_ROUNDS)
                    print(
                        f"exec_cpu {CONCURRENCY} concurrent [{name}, {event_loop}]: CPU per "
                        f"command {_ms(many.total)} = broker {_ms(many.broker)} + shells "
                        f"{_ms(many.shells)} + client {_ms(many.client)}; {1 / many.wall:.0f}/s",
                        flush=True,
                    )
        fast, slow = eventloop.LOOPS
        ratios = ", ".join(
            f"{name} {broker[name, fast] / broker[name, slow]:.2f}x" for name in ("gRPC", "SSH")
        )
        print(f"exec_cpu broker CPU per exec on {fast} / on {slow}: {ratios}", flush=True)

        async def local() -> None:
            await _concurrent(lambda: _process(["bash", "-c", "true"]))

        n = CONCURRENCY * CONCURRENT_ROUNDS
        await local()
        rounds = []
        for _ in range(CPU_ROUNDS):  # the cheapest round, as the broker's (_cpu_of)
            before = (os.times(), time.perf_counter())
            await local()
            after = (os.times(), time.perf_counter())
            own = (after[0].user + after[0].system - before[0].user - before[0].system) / n
            shells = (
                after[0].children_user + after[0].children_system
                - before[0].children_user - before[0].children_system
            ) / n  # fmt: skip
            rounds.append((own + shells, shells, own, n / (after[1] - before[1])))
        total, shells, own, rate = min(rounds)
        print(
            f"exec_cpu {CONCURRENCY} concurrent [local bash -c true]: CPU per command "
            f"{_ms(total)} = shells {_ms(shells)} + parent {_ms(own)}; {rate:.0f}/s",
            flush=True,
        )

    asyncio.run(run())


def _children(pid: int) -> list[int]:
    """The broker's direct children (the commands' shells)."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(p) for p in f.read().split()]
    return found


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
