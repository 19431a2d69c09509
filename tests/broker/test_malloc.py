"""The allocator settings for streaming: large short-lived buffers stop costing page faults.

Each case runs in a fresh interpreter (the settings are process-wide and set once). The churn
below is the shape of a streamed read: a few 256 KiB buffers alive at once, then all freed.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHURN = """
import resource, sys
sys.path[:0] = [{root!r}, {root!r} + "/proto"]
from opsbroker.malloc import tune_allocator
applied = tune_allocator() if {tune} else None
again = tune_allocator() if {tune} else None

def churn(rounds):
    for _ in range(rounds):
        held = [bytes(256 * 1024 + n) for n in range(8)]  # zero-filled: every page touched
        del held

churn(3)  # warm up: the heap reaches its working size
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
churn(200)
print(applied, again, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""

PAGES_PER_ROUND = 8 * 64  # 8 buffers of 64 pages each


def _churn(tune: bool, **env: str) -> tuple[str, str, int]:
    """(first result, second result, page faults over 200 rounds) in a fresh interpreter."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_"))}
    out = subprocess.run(
        [sys.executable, "-c", CHURN.format(root=str(ROOT), tune=tune)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    return out[0], out[1], int(out[2])


glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="tunes glibc only")


@glibc
def test_tuned_heap_reuses_its_pages() -> None:
    applied, again, faults = _churn(tune=True)
    assert (applied, again) == ("True", "True")
    assert faults < PAGES_PER_ROUND  # not even one round's worth in 200 rounds


@glibc
def test_default_heap_faults_on_every_round() -> None:
    """The baseline the tuning fixes (if glibc ever changes this, the tuning may be moot)."""
    _, _, faults = _churn(tune=False)
    assert faults > 20 * PAGES_PER_ROUND  # measured: 48,000 (about a round in two)


@glibc
@pytest.mark.parametrize(
    "setting",
    [
        "MALLOC_TRIM_THRESHOLD_=1048576",
        "MALLOC_MMAP_THRESHOLD_=131072",
        "GLIBC_TUNABLES=glibc.malloc.trim_threshold=1048576",
    ],
)
def test_an_operators_setting_is_kept(setting: str) -> None:
    name, value = setting.split("=", 1)
    applied, _, _ = _churn(tune=True, **{name: value})
    assert applied == "False"
