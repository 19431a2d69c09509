"""Benchmarks: each prints one line with the ratio of opsbroker's cost to a plain baseline.

Run ``python scripts/bench.py`` for all of them or ``python scripts/bench.py NAME...`` for some;
``--list`` names them. A benchmark is a function registered with :func:`benchmark`; it returns
``(ratio, target, detail)`` and the runner prints ``name: ratio x (target < T x) detail``. Add new
ones to this file the same way so that one run reports every figure.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker import Broker
from broker._rg import rg_path

Result = tuple[float, float, str]
BENCHMARKS: dict[str, Callable[[], Result]] = {}


def benchmark(fn: Callable[[], Result]) -> Callable[[], Result]:
    """Register ``fn`` under its name (``bench_`` prefix dropped)."""
    BENCHMARKS[fn.__name__.removeprefix("bench_")] = fn
    return fn


def best_of(rounds: int, fn: Callable[[], float]) -> float:
    """The smallest of ``rounds`` timings (the least disturbed by other load)."""
    return min(fn() for _ in range(rounds))


@benchmark
def bench_read_4k() -> Result:
    """Confined ``read_file`` of a 4 KiB file against plain ``open().read()``."""
    count = 20_000
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "f")
        Path(path).write_bytes(os.urandom(4096))

        def plain() -> float:
            start = time.perf_counter()
            for _ in range(count):
                with open(path, "rb") as f:
                    f.read()
            return (time.perf_counter() - start) / count

        async def confined_async() -> float:
            async with Broker(tmp) as broker:
                start = time.perf_counter()
                for _ in range(count):
                    await broker.read_file(path)
                return (time.perf_counter() - start) / count

        def confined() -> float:
            return asyncio.run(confined_async())

        base = best_of(5, plain)
        ours = best_of(5, confined)
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
        ratio, target, detail = BENCHMARKS[name]()
        verdict = "ok" if ratio < target else "OVER TARGET"
        print(f"{name}: {ratio:.2f}x (target < {target}x, {verdict}) {detail}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
