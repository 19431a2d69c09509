"""Process-escape suite: whatever a command does, nothing of it survives the call.

Each case runs a few times, in cgroup mode and with the fallback forced; survivors are counted by
scanning ``/proc`` for an environment marker, never from the manager's own bookkeeping.
"""

from __future__ import annotations

import random
import signal
import time
from dataclasses import dataclass

import pytest

from broker._process import ProcessManager
from broker._shell import bash_argv
from operations import ExecResult, KillReason

from ._procscan import marked_env, new_marker, survivors, survivors_by_cmdline
from .conftest import CGROUPS, MODES, TEST_KILL_GRACE_S, make_manager

# Marked here, not only by tests/conftest.py: anyio's plugin drops the parameters of async tests
# that are marked after collection.
pytestmark = pytest.mark.anyio

ROUNDS = 3
SLACK_S = 1.0
"""Scheduling slack on this shared machine, added to every time bound."""


@dataclass(frozen=True)
class Case:
    name: str
    command: str
    timeout: float | None
    want: ExecResult
    max_seconds: float


IDLE_AND_KILL = 0.1 + TEST_KILL_GRACE_S

CASES = [
    Case(
        "wait_on_background",
        "sleep 300 & wait",
        0.5,
        ExecResult(None, KillReason.TIMEOUT),
        0.5 + TEST_KILL_GRACE_S,
    ),
    Case("setsid_background", "setsid sleep 1000 &", None, ExecResult(0), IDLE_AND_KILL),
    Case(
        "double_fork_setsid",
        "( setsid sh -c 'sleep 1000' & ); exit 0",
        None,
        ExecResult(0),
        IDLE_AND_KILL,
    ),
    Case(
        "nohup_disown",
        "nohup sleep 1000 >/dev/null 2>&1 & disown",
        None,
        ExecResult(0),
        IDLE_AND_KILL,
    ),
    Case(
        "ignores_term",
        "trap '' TERM INT HUP; sleep 1000",
        0.5,
        ExecResult(None, KillReason.TIMEOUT),
        0.5 + TEST_KILL_GRACE_S,
    ),
    Case("holds_stdout", "(sleep 1000; echo late) & echo done", None, ExecResult(0), IDLE_AND_KILL),
    Case(
        "bounded_fork_tree",
        "f() { if [ $1 -gt 0 ]; then f $(($1-1)) & f $(($1-1)) & fi; sleep 1000; }; f 5",
        0.8,
        ExecResult(None, KillReason.TIMEOUT),
        0.8 + TEST_KILL_GRACE_S,
    ),
    Case("cat_sees_eof", "cat; echo rc=$?", 5.0, ExecResult(0), 0.5),
    Case(
        "kill_own_group",
        "sleep 1000 & kill -9 0",
        5.0,
        ExecResult(None, signal=signal.SIGKILL),
        0.5,
    ),
    Case(
        "stop_own_group",
        "sleep 1000 & kill -STOP 0",
        0.5,
        ExecResult(None, KillReason.TIMEOUT),
        0.5 + TEST_KILL_GRACE_S,
    ),
]


CGROUP_ONLY = [
    # Leaves the session, scrubs the cookie and loses its parent: only a cgroup still holds it
    # (the fallback's documented gap).
    Case(
        "setsid_scrubbed_env",
        "env -u OPSBROKER_EXEC_ID setsid sleep {n} & echo x",
        None,
        ExecResult(0),
        IDLE_AND_KILL,
    ),
    Case(
        "scrubbed_env_double_fork",
        "( env -i setsid sleep {n} & ); exit 0",
        None,
        ExecResult(0),
        IDLE_AND_KILL,
    ),
]


@pytest.mark.parametrize("round_", range(ROUNDS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_no_survivors(manager: ProcessManager, case: Case, round_: int) -> None:
    marker = new_marker()
    output: list[bytes] = []
    start = time.monotonic()
    result = await manager.exec(
        bash_argv(case.command),
        cwd="/",
        on_data=output.append,
        timeout=case.timeout,
        env=marked_env(marker),
    )
    elapsed = time.monotonic() - start
    assert survivors(marker) == []
    assert result == case.want, b"".join(output)
    assert elapsed < case.max_seconds + SLACK_S


CGROUP_MODES = [m for m in MODES if m.startswith("cgroup")]


@pytest.mark.skipif(not CGROUPS, reason="needs a writable cgroup v2 tree")
@pytest.mark.parametrize("round_", range(ROUNDS))
@pytest.mark.parametrize("case", CGROUP_ONLY, ids=lambda c: c.name)
@pytest.mark.parametrize("cgroup_mode", CGROUP_MODES)
async def test_no_survivors_cgroup_only(case: Case, round_: int, cgroup_mode: str) -> None:
    pm = make_manager(cgroup_mode)
    marker = new_marker()
    # env -i drops the test marker too: the sleep is also found by a unique argument.
    seconds = f"{1000 + random.randrange(10**6) / 10**6:.6f}"
    try:
        start = time.monotonic()
        result = await pm.exec(
            bash_argv(case.command.format(n=seconds)),
            cwd="/",
            on_data=lambda _: None,
            env=marked_env(marker),
        )
        elapsed = time.monotonic() - start
    finally:
        await pm.aclose()
    assert survivors_by_cmdline(seconds) == []
    assert survivors(marker) == []
    assert result == case.want
    assert elapsed < case.max_seconds + SLACK_S


async def test_cat_output_and_background_holding_stdout(manager: ProcessManager) -> None:
    marker = new_marker()
    output: list[bytes] = []
    result = await manager.exec(
        bash_argv("cat; echo rc=$?; (sleep 0.03; echo late; sleep 1000) & echo early"),
        cwd="/",
        on_data=output.append,
        env=marked_env(marker),
    )
    assert result == ExecResult(0)
    assert b"".join(output) == b"rc=0\nearly\nlate\n"
    assert survivors(marker) == []


async def test_fork_bomb_under_pids_max(mode: str) -> None:
    """A real fork bomb, bounded by ``pids.max`` (cgroup mode) or by depth (fallback)."""
    marker = new_marker()
    if mode.startswith("cgroup"):
        pm = make_manager(mode, pids_max=64)
        assert "pids" in pm.capabilities().limits
        command = "b() { b | b & }; b; sleep 1000"
    else:
        pm = make_manager(mode)
        command = "b() { [ $1 -gt 0 ] && { b $(($1-1)) | b $(($1-1)) & }; sleep 1000; }; b 5"
    output: list[bytes] = []
    try:
        start = time.monotonic()
        result = await pm.exec(
            bash_argv(command), cwd="/", on_data=output.append, timeout=1.0, env=marked_env(marker)
        )
        elapsed = time.monotonic() - start
    finally:
        await pm.aclose()
    assert result == ExecResult(None, KillReason.TIMEOUT)
    if mode.startswith("cgroup"):
        assert b"fork" in b"".join(output)  # bash met pids.max: "fork: retry: Resource ..."
    assert survivors(marker) == []
    assert elapsed < 1.0 + TEST_KILL_GRACE_S + SLACK_S + 1.0
