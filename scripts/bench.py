"""Benchmarks: each prints one line with the ratio of opsbroker's cost to a plain baseline.

Run ``python scripts/bench.py`` for all of them or ``python scripts/bench.py NAME...`` for some;
``--list`` names them. A benchmark is a function registered with :func:`benchmark`; it returns
``(ratio, target, detail)`` and the runner prints ``name: ratio x (target < T x) detail``. Add new
ones to this file the same way so that one run reports every figure.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker import Broker
from broker._cgroup import CgroupTree
from broker._process import ProcessManager
from broker._rg import rg_path
from broker._shell import bash_argv

Result = tuple[float, float, str]
"""(ratio, target, detail); a benchmark with several figures prints them itself and returns None."""
BENCHMARKS: dict[str, Callable[[], Result | None]] = {}


def benchmark(fn: Callable[[], Result | None]) -> Callable[[], Result | None]:
    """Register ``fn`` under its name (``bench_`` prefix dropped)."""
    BENCHMARKS[fn.__name__.removeprefix("bench_")] = fn
    return fn


def best_of(rounds: int, fn: Callable[[], float]) -> float:
    """The smallest of ``rounds`` timings (the least disturbed by other load)."""
    return min(fn() for _ in range(rounds))


@benchmark
def bench_read_4k() -> Result:
    """Confined ``read_file`` of a 4 KiB file against plain ``open().read()``.

    The two are timed in alternating short rounds in one process, and the best round of each is
    kept, so that load from elsewhere on the machine hits both alike.
    """
    count, rounds = 2_000, 25
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "f")
        Path(path).write_bytes(os.urandom(4096))

        def plain() -> float:
            start = time.perf_counter()
            for _ in range(count):
                with open(path, "rb") as f:
                    f.read()
            return (time.perf_counter() - start) / count

        async def run() -> tuple[float, float]:
            async with Broker(tmp) as broker:

                async def confined() -> float:
                    start = time.perf_counter()
                    for _ in range(count):
                        await broker.read_file(path)
                    return (time.perf_counter() - start) / count

                base = ours = float("inf")
                for _ in range(rounds):
                    base = min(base, plain())
                    ours = min(ours, await confined())
                return base, ours

        base, ours = asyncio.run(run())
    detail = f"confined {ours * 1e6:.1f} us, open().read() {base * 1e6:.1f} us per read"
    return ours / base, 2.0, detail


def make_tree(top: Path, files: int = 10_000, seed: int = 7) -> None:
    """``files`` text files of about 2 KiB in 100 directories, 1% of them with the needle."""
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "omega", "lambda", "sigma", "kappa"]
    for i in range(files):
        d = top / f"d{i % 100:02d}" / f"s{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        lines = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(40)]
        if i % 100 == 0:
            lines[rng.randrange(40)] += " needle_xyz found"
        (d / f"f{i}.txt").write_text("\n".join(lines) + "\n")


@benchmark
def bench_search_10k() -> Result:
    """Confined ``search`` over a generated 10,000-file tree against ``rg`` run directly."""
    rg = rg_path()
    if rg is None:
        return float("nan"), 1.5, "rg is not installed"
    with tempfile.TemporaryDirectory() as tmp:
        top = Path(tmp) / "tree"
        make_tree(top)

        def plain() -> float:
            start = time.perf_counter()
            out = subprocess.run([rg, "needle_xyz", str(top)], capture_output=True, check=True)
            assert out.stdout.count(b"\n") == 100
            return time.perf_counter() - start

        async def confined_async(engine: str) -> float:
            async with Broker(str(top), search_engine=engine) as broker:
                start = time.perf_counter()
                found = [m async for m in broker.search("needle_xyz", str(top), limit=10_000)]
                assert len(found) == 100, len(found)
                return time.perf_counter() - start

        plain()  # warm the page cache
        base = best_of(5, plain)
        ours = best_of(5, lambda: asyncio.run(confined_async("auto")))
        walk = best_of(1, lambda: asyncio.run(confined_async("python")))
    detail = (
        f"confined {ours * 1e3:.0f} ms, rg {base * 1e3:.0f} ms; "
        f"fd-walk fallback {walk * 1e3:.0f} ms ({walk / base:.1f}x)"
    )
    return ours / base, 1.5, detail


def _modes() -> list[str]:
    """``cgroup`` and ``fallback`` are the defaults (Landlock signal scope where available)."""
    tree = CgroupTree.create()
    if tree is not None:
        tree.remove()
    cgroup = ["cgroup", "cgroup-unscoped"] if tree is not None else []
    return [*cgroup, "fallback", "fallback-unscoped"]


def _manager(mode: str) -> ProcessManager:
    return ProcessManager(
        use_cgroups=mode.startswith("cgroup"),
        scope_signals=False if mode.endswith("-unscoped") else None,
    )


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


EXEC_TRUE_ROUNDS = 10
EXEC_TRUE_BATCH = 20


@benchmark
def exec_true() -> None:
    """Latency of ``exec(["true"])`` through the manager against asyncio's own subprocess.

    Each mode is measured in its own block, interleaved with the asyncio floor: a mode that forks
    leaves the parent's pages write-protected for a while, which would slow whatever runs next.
    """

    async def run(mode: str) -> tuple[list[float], list[float]]:
        pm = _manager(mode)
        floor: list[float] = []
        ours: list[float] = []
        try:
            await pm.exec(["true"], cwd="/", on_data=lambda _: None)
            for _ in range(EXEC_TRUE_ROUNDS):  # interleaved batches: load changes hit both sides
                for _ in range(EXEC_TRUE_BATCH):
                    t = time.perf_counter()
                    proc = await asyncio.create_subprocess_exec("true")
                    await proc.wait()
                    floor.append(time.perf_counter() - t)
                for _ in range(EXEC_TRUE_BATCH):
                    t = time.perf_counter()
                    await pm.exec(["true"], cwd="/", on_data=lambda _: None)
                    ours.append(time.perf_counter() - t)
        finally:
            await pm.aclose()
        return floor, ours

    parts = []
    for mode in _modes():
        floor, ours = asyncio.run(run(mode))
        f, o = statistics.median(floor), statistics.median(ours)
        parts.append(f"{mode} {o * 1e3:.2f} ms vs asyncio {f * 1e3:.2f} ms = {o / f:.2f}x")
    print("exec_true (median, target < 1.5x):", "; ".join(parts))


CANCEL_TREE = 50
CANCEL_ROUNDS = 30


def _count_marked(marker: bytes) -> int:
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if marker in f.read().split(b"\0"):
                        count += 1
            except OSError:
                pass
    return count


@benchmark
def cancel_to_empty_tree() -> None:
    """Time from cancelling ``exec`` to an empty tree (the call returns only then), 50 processes."""
    command = f"for i in $(seq {CANCEL_TREE - 1}); do sleep 1000 & done; wait"

    async def one(pm: ProcessManager, i: int) -> float:
        marker = f"BENCH_MARK={os.getpid()}-{i}"
        env = {"PATH": "/usr/bin:/bin", "BENCH_MARK": marker.split("=", 1)[1]}
        task = asyncio.create_task(
            pm.exec(bash_argv(command), cwd="/", on_data=lambda _: None, env=env)
        )
        deadline = time.monotonic() + 10
        while _count_marked(marker.encode()) < CANCEL_TREE:
            if time.monotonic() > deadline:
                raise RuntimeError("tree did not start")
            await asyncio.sleep(0.01)
        t = time.perf_counter()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        elapsed = time.perf_counter() - t
        if _count_marked(marker.encode()):
            raise RuntimeError("survivors after cancel")
        return elapsed

    async def run(mode: str) -> list[float]:
        pm = _manager(mode)
        try:
            return [await one(pm, i) for i in range(CANCEL_ROUNDS)]
        finally:
            await pm.aclose()

    for mode in _modes():
        values = asyncio.run(run(mode))
        print(
            f"cancel_to_empty_tree[{mode}] ({CANCEL_TREE} processes, {CANCEL_ROUNDS} runs, "
            f"target p99 < 100 ms): p50 {_pct(values, 0.5) * 1e3:.1f} ms, "
            f"p99 {_pct(values, 0.99) * 1e3:.1f} ms = {_pct(values, 0.99) / 0.1:.2f}x of target"
        )


STREAM_BYTES = 2 * 1024**3


@benchmark
def stream_output() -> None:
    """``yes | head -c 2G`` through the manager: throughput against the shell alone, RSS growth."""

    def rss() -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))

    async def run() -> tuple[float, float, int]:
        t = time.perf_counter()
        proc = await asyncio.create_subprocess_shell(
            f"yes | head -c {STREAM_BYTES} | cat > /dev/null"
        )
        await proc.wait()
        floor = time.perf_counter() - t
        pm = ProcessManager()
        before = rss()
        peak = before
        seen = 0

        def on_data(data: bytes) -> None:
            nonlocal peak, seen
            seen += len(data)
            peak = max(peak, rss()) if seen % (64 * 1024 * 1024) < len(data) else peak

        t = time.perf_counter()
        await pm.exec(bash_argv(f"yes | head -c {STREAM_BYTES}"), cwd="/", on_data=on_data)
        elapsed = time.perf_counter() - t
        await pm.aclose()
        return floor, elapsed, peak - before

    floor, elapsed, growth = asyncio.run(run())
    print(
        f"stream_output (2 GiB): manager {STREAM_BYTES / elapsed / 1e6:.0f} MB/s, "
        f"shell pipe floor {STREAM_BYTES / floor / 1e6:.0f} MB/s = {elapsed / floor:.2f}x time; "
        f"broker RSS growth {growth / 1024**2:.1f} MiB"
    )


# The SSH transport's figures (SSH backend beside gRPC, against OpenSSH) live in bench_ssh.py.
import bench_ssh  # noqa: E402

for _ssh_benchmark in bench_ssh.BENCHMARKS.values():
    benchmark(_ssh_benchmark)


def main(argv: list[str]) -> int:
    if "--list" in argv:
        print("\n".join(BENCHMARKS))
        return 0
    names = argv or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; try --list", file=sys.stderr)
        return 2
    for name in names:
        result = BENCHMARKS[name]()
        if result is None:
            continue
        ratio, target, detail = result
        verdict = "ok" if ratio < target else "OVER TARGET"
        print(f"{name}: {ratio:.2f}x (target < {target}x, {verdict}) {detail}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
