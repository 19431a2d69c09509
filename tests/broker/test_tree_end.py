"""When a command's shell has exited, is anything of its tree left?

Fallback mode answers from the broker's own children where it can (the subreaper adopts the top of
every surviving branch) and sweeps ``/proc`` only when that cannot tell. These tests check the
answer is never "empty" while a member lives, that the cheap answer is the one a plain command
gets, and that orphans exiting around the shell's exit leave neither survivors nor zombies.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import time
from pathlib import Path

import pytest

import broker._proctree as _proctree
import broker._tracker_proc as tracker_proc
from broker._process import ProcessManager
from broker._proctree import COOKIE_VAR, own_children, read_cookie, read_stat
from broker._shell import bash_argv
from operations import ExecResult

from ._procscan import kill_pids, marked_env, new_marker, survivors, survivors_by_cmdline
from .conftest import MODES, make_manager

pytestmark = pytest.mark.anyio

FALLBACK_MODES = [m for m in MODES if m.startswith("fallback")]
ORPHAN_ROUNDS = 40
REEXECS = 300


@pytest.fixture(params=FALLBACK_MODES)
async def fallback(request: pytest.FixtureRequest) -> ProcessManager:
    pm = make_manager(str(request.param))
    try:
        yield pm  # type: ignore[misc]
    finally:
        await pm.aclose()


def _unique_seconds() -> str:
    """A sleep argument no other process has, to find a process that dropped its environment."""
    return f"{1000 + random.randrange(10**6) / 10**6:.6f}"


def _zombie_child() -> subprocess.Popen[bytes]:
    """A child that has exited and is not reaped yet."""
    child = subprocess.Popen(["true"])
    for _ in range(1000):
        if (st := read_stat(child.pid)) is not None and not st.alive:
            break
        time.sleep(0.005)
    return child


async def test_session_member_under_an_escaped_parent_is_killed(
    manager: ProcessManager, mode: str
) -> None:
    """The parent leaves the session and drops the cookie (fallback's documented gap) after
    forking a child that keeps both: the broker adopts only the parent, yet the child is found."""
    marker = new_marker()
    seconds = _unique_seconds()
    command = f"( sleep 1000 & exec setsid env -i sleep {seconds} ) & sleep 0.2; exit 0"
    try:
        result = await manager.exec(
            bash_argv(command), cwd="/", on_data=lambda _: None, env=marked_env(marker)
        )
        assert result == ExecResult(0)
        assert survivors(marker) == []
        if mode.startswith("cgroup"):
            assert survivors_by_cmdline(seconds) == []
    finally:
        kill_pids(survivors_by_cmdline(seconds))


async def test_a_plain_command_needs_no_sweep(
    fallback: ProcessManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweeps = 0
    real = tracker_proc.stats_since

    def counted(*args: object, **kwargs: object) -> object:
        nonlocal sweeps
        sweeps += 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tracker_proc, "stats_since", counted)
    # An older zombie child (as an escaped process that died leaves) must not force sweeps.
    older = _zombie_child()
    try:
        await asyncio.sleep(0.05)  # older by a few clock ticks (start times count in ticks)
        for command in ("true", "echo hi; exit 3", "(true) & wait"):
            await fallback.exec(bash_argv(command), cwd="/", on_data=lambda _: None)
    finally:
        older.wait()
    # Without the kernel's children lists (CONFIG_PROC_CHILDREN) every command is swept.
    assert sweeps == (0 if own_children() is not None else 3)

    marker = new_marker()
    await fallback.exec(
        bash_argv("sleep 1000 & exit 0"), cwd="/", on_data=lambda _: None, env=marked_env(marker)
    )
    assert survivors(marker) == []
    assert sweeps > 0  # a background process left behind is killed through the sweep


async def test_orphans_exiting_around_the_shell_leave_nothing(
    fallback: ProcessManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Orphans that exit just before, with, or just after their shell: each end is seen, and
    every orphan the broker adopted is reaped (a ``setsid`` one that died unseen by the stale
    rule, here made immediate), never left a zombie."""
    monkeypatch.setattr(tracker_proc, "STALE_ZOMBIE_S", 0.0)
    marker = new_marker()
    for _ in range(ORPHAN_ROUNDS):
        delay = random.choice(["0", "0.001", "0.003", "0.01"])
        command = f"sleep {delay} & (sleep {delay} &) ; setsid sleep {delay} & sleep 0.002"
        result = await fallback.exec(
            bash_argv(command), cwd="/", on_data=lambda _: None, env=marked_env(marker)
        )
        assert result == ExecResult(0)
        assert survivors(marker) == []
    await fallback.exec(bash_argv("true"), cwd="/", on_data=lambda _: None)
    me = os.getpid()
    zombies = [
        pid
        for pid in own_children() or []
        if (st := read_stat(pid)) is not None and st.ppid == me and not st.alive
    ]
    assert zombies == []


def test_a_cookie_is_read_through_an_exec(tmp_path: Path) -> None:
    """A process inside ``execve`` shows an empty environment for a moment; its cookie must
    still be found (else a sweep that meets an exec'ing member lets it escape)."""
    script = tmp_path / "reexec"
    script.write_text('#!/bin/sh\n[ "$1" -gt 0 ] && exec "$0" $(($1 - 1))\nexit 0\n')
    script.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", COOKIE_VAR: "the-cookie"}
    proc = subprocess.Popen([str(script), str(REEXECS)], env=env)
    reads = missed = 0
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            reads += 1
            if read_cookie(proc.pid) != b"the-cookie":
                st = read_stat(proc.pid)
                missed += st is not None and st.alive
    finally:
        proc.kill()
        proc.wait()
    assert reads > REEXECS
    assert missed == 0


def test_an_empty_environment_is_not_waited_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process started with no environment at all (``env -i``) has no cookie at once: a
    command that starts many could otherwise stall every sweep by the exec wait each."""
    yields = 0

    def counted() -> None:
        nonlocal yields
        yields += 1

    proc = subprocess.Popen(["sleep", "30"], env={})
    try:
        for _ in range(1000):  # until its exec is done
            if (st := read_stat(proc.pid)) is not None and st.env_start:
                break
            time.sleep(0.002)
        monkeypatch.setattr(_proctree.os, "sched_yield", counted)
        assert [read_cookie(proc.pid) for _ in range(50)] == [None] * 50
    finally:
        proc.kill()
        proc.wait()
    assert yields == 0
