"""Output streaming: large, binary and unterminated output with the broker's memory flat, back-
pressure from a slow consumer, and a kill for the output limit (the signal's reason) taking the tree."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from pathlib import Path

import pytest

from broker._process import READ_CHUNK, ProcessManager
from broker._shell import bash_argv
from operations import AbortController, AbortSignal, ExecResult, KillReason

from ._procscan import marked_env, new_marker, rss_bytes, survivors
from .conftest import TEST_KILL_GRACE_S, make_manager

pytestmark = pytest.mark.anyio  # see test_process_escape.py

RSS_BOUND = 48 * 1024 * 1024
"""Allowed RSS growth while streaming hundreds of MB: far below the output, above allocator noise."""


class Counter:
    """An on_data that keeps only counts, so any memory growth is the broker's own."""

    def __init__(self, *, digest: bool = True) -> None:
        self.bytes = 0
        self.chunks = 0
        self.newlines = 0
        self.peak_rss = 0
        self.digest = hashlib.sha256() if digest else None

    def __call__(self, data: bytes) -> None:
        self.bytes += len(data)
        self.chunks += 1
        if self.digest is not None:
            self.newlines += data.count(b"\n")
            self.digest.update(data)
        if self.chunks % 64 == 0:
            self.peak_rss = max(self.peak_rss, rss_bytes())


async def test_yes_head_512m_with_flat_memory(manager: ProcessManager) -> None:
    counter = Counter(digest=False)
    before = rss_bytes()
    result = await manager.exec(bash_argv("yes | head -c 512M"), cwd="/", on_data=counter)
    assert result == ExecResult(0)
    assert counter.bytes == 512 * 1024 * 1024
    assert counter.peak_rss - before < RSS_BOUND


async def test_100mb_line_without_newline(manager: ProcessManager) -> None:
    counter = Counter()
    result = await manager.exec(
        bash_argv("head -c 100000000 /dev/zero | tr '\\0' a"), cwd="/", on_data=counter
    )
    assert result == ExecResult(0)
    assert counter.bytes == 100_000_000
    assert counter.newlines == 0
    assert counter.digest is not None
    assert counter.digest.hexdigest() == hashlib.sha256(b"a" * 100_000_000).hexdigest()


async def test_binary_output_is_byte_exact(manager: ProcessManager, tmp_path: Path) -> None:
    blob = os.urandom(3 * READ_CHUNK + 12345) + bytes(range(256))
    (tmp_path / "blob").write_bytes(blob)
    output: list[bytes] = []
    result = await manager.exec(
        bash_argv(f"cat {tmp_path / 'blob'}"), cwd="/", on_data=output.append
    )
    assert result == ExecResult(0)
    assert b"".join(output) == blob


@pytest.mark.parametrize("command", ["yes", "setsid yes & setsid yes & wait"])
async def test_output_limit_kills_tree_and_says_so(mode: str, command: str) -> None:
    """The output limit's path: ``on_data`` aborts the signal with ``OUTPUT_LIMIT`` (as the
    policy layer does); the whole tree dies and the result carries that reason, unrewritten."""
    pm = make_manager(mode)
    marker = new_marker()
    controller = AbortController()
    received = 0

    def limited(data: bytes) -> None:
        nonlocal received
        if received < 100_000:
            received = min(100_000, received + len(data))
            if received == 100_000:
                controller.abort(KillReason.OUTPUT_LIMIT)

    try:
        result = await pm.exec(
            bash_argv(command),
            cwd="/",
            on_data=limited,
            signal=controller.signal,
            timeout=20,
            env=marked_env(marker),
        )
    finally:
        await pm.aclose()
    assert result == ExecResult(None, KillReason.OUTPUT_LIMIT)
    assert received == 100_000
    assert survivors(marker) == []


@pytest.mark.parametrize("reason", list(KillReason))
async def test_the_signal_reason_is_the_kill_reason(
    manager: ProcessManager, reason: KillReason
) -> None:
    """Each KillReason given to ``abort`` comes back as the result's reason, whether the signal
    aborts before the command starts or while it runs; any other reason is ``ABORTED``."""
    assert (
        await manager.exec(
            bash_argv("true"),
            cwd="/",
            on_data=lambda _: None,
            signal=AbortSignal.aborted_signal(reason),
        )
    ) == ExecResult(None, reason)
    controller = AbortController()
    marker = new_marker()

    def started(data: bytes) -> None:
        controller.abort(reason)

    result = await manager.exec(
        bash_argv("echo up; sleep 1000"),
        cwd="/",
        on_data=started,
        signal=controller.signal,
        env=marked_env(marker),
    )
    assert result == ExecResult(None, reason)
    assert survivors(marker) == []
    untyped = AbortSignal.aborted_signal("client")
    result = await manager.exec(bash_argv("true"), cwd="/", on_data=lambda _: None, signal=untyped)
    assert result == ExecResult(None, KillReason.ABORTED)


async def test_killed_while_writing(manager: ProcessManager) -> None:
    marker = new_marker()
    counter = Counter()
    start = time.monotonic()
    result = await manager.exec(
        bash_argv("yes & yes & wait"), cwd="/", on_data=counter, timeout=1.0, env=marked_env(marker)
    )
    # A producer that never lets the pipe run dry must not starve the timeout (a sync on_data).
    assert time.monotonic() - start < 1.0 + TEST_KILL_GRACE_S + 1.0
    assert result == ExecResult(None, KillReason.TIMEOUT)
    assert counter.bytes > 0
    assert survivors(marker) == []


async def test_slow_consumer_slows_the_producer(manager: ProcessManager) -> None:
    """Backpressure: the broker reads no faster than on_data completes, and buffers nothing."""
    delivered = 0

    async def slow(data: bytes) -> None:
        nonlocal delivered
        delivered += len(data)
        await asyncio.sleep(0.01)

    marker = new_marker()
    before = rss_bytes()
    result = await manager.exec(
        bash_argv("yes"), cwd="/", on_data=slow, timeout=0.5, env=marked_env(marker)
    )
    assert result == ExecResult(None, KillReason.TIMEOUT)
    # 0.5 s plus the kill grace at one chunk per 10 ms, at most.
    assert delivered <= (0.5 + TEST_KILL_GRACE_S + 1.0) / 0.01 * READ_CHUNK
    assert rss_bytes() - before < RSS_BOUND
    assert survivors(marker) == []
