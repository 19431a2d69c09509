"""The policy's ``[exec]`` limits reach the process manager the broker builds (``pids_max``,
``memory_max``, ``kill_grace``), and a kill reason stays one ``KillReason`` from the signal through
the result to the audit line (the policy's output limit included), on the memory and local
backends."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker._cgroup import CgroupTree
from broker._core import Broker
from operations import (
    AbortController,
    CommandContext,
    ExecResult,
    GuardedBackend,
    InMemoryOperations,
    KillReason,
    Policy,
)
from tests.policy._fake import ListAudit

from ._procscan import kill_pids, marked_env, new_marker, survivors
from .conftest import CGROUPS

pytestmark = pytest.mark.anyio  # see test_process_escape.py

SLACK_S = 1.0
"""Scheduling slack on a loaded 2-core machine."""


def _broker(root: Path, **exec_table: object) -> Broker:
    return Broker(str(root), exec_policy=Policy.from_mapping({"exec": exec_table}).exec)


def test_the_defaults_are_safe() -> None:
    spec = Policy().exec
    assert spec.pids_max == 4096  # a fork bomb is bounded wherever cgroups are writable
    assert spec.memory_max is None
    assert spec.kill_grace == 1.0


def test_limits_are_validated() -> None:
    for bad in ({"pids_max": 0}, {"memory_max": 0}, {"kill_grace": -1}, {"kill_grace": 61}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            Policy.from_mapping({"exec": bad})


@pytest.mark.skipif(not CGROUPS, reason="pids.max needs a writable cgroup v2 tree")
async def test_a_fork_bomb_is_bounded_by_the_policy_pids_max(tmp_path: Path) -> None:
    marker = new_marker()
    output: list[bytes] = []
    broker = _broker(tmp_path, pids_max=64)
    try:
        assert "pids" in broker._process_manager("exec").capabilities().limits
        start = time.monotonic()
        result = await broker.exec(
            "b() { b | b & }; b; sleep 1000",
            str(tmp_path),
            on_data=output.append,
            timeout=1.0,
            env=marked_env(marker),
        )
        elapsed = time.monotonic() - start
    finally:
        await broker.aclose()
        kill_pids(survivors(marker))  # only if the assertions below are about to fail
    assert result == ExecResult(None, KillReason.TIMEOUT)
    assert b"fork" in b"".join(output)  # bash met pids.max: "fork: retry: Resource ..."
    assert survivors(marker) == []
    assert elapsed < 1.0 + 1.0 + SLACK_S  # timeout + default kill grace + slack


async def test_the_policy_memory_max_holds_a_command(tmp_path: Path) -> None:
    """Where the memory controller is writable the kernel kills the command at the policy's
    limit (137); where it is not, the limit is reported as not enforced and the command runs."""
    broker = _broker(tmp_path, memory_max=64 << 20)
    out: list[bytes] = []
    try:
        enforced = "memory" in broker._process_manager("exec").capabilities().limits
        result = await broker.exec(
            f"{sys.executable} -c 'x = bytearray(300 << 20)'; echo rc=$?",
            str(tmp_path),
            on_data=out.append,
            timeout=30,
        )
    finally:
        await broker.aclose()
    assert result == ExecResult(0)
    assert enforced == CGROUPS  # this host's tree delegates memory (v2 or a v1 hierarchy)
    assert b"".join(out).endswith(b"rc=137\n" if enforced else b"rc=0\n")


@pytest.mark.skipif(not CGROUPS, reason="needs a writable cgroup v2 tree")
async def test_a_command_runs_in_each_of_its_limit_groups(tmp_path: Path) -> None:
    """The command is a member of its group in every hierarchy that holds one of its limits:
    the v2 group and, on a hybrid host, the v1 ``pids`` and ``memory`` groups of the same name.
    It enters a v1 group through ``tasks`` (its one thread), never ``cgroup.procs``, whose write
    waits for an RCU grace period after a quiet spell while the broker's loop waits for the
    spawn (``CommandCgroup.spawn_fds``)."""
    broker = _broker(tmp_path, pids_max=64, memory_max=1 << 30)
    out: list[bytes] = []
    try:
        result = await broker.exec("cat /proc/self/cgroup", str(tmp_path), on_data=out.append)
    finally:
        await broker.aclose()
    assert result == ExecResult(0)
    lines = [line.split(":", 2) for line in b"".join(out).decode().splitlines()]
    group = next(path for hid, _, path in lines if hid == "0").split("/")[-2:]
    assert group[1].startswith("cmd-")  # opsbroker-<owner>/cmd-<n>, the command's own
    tree = CgroupTree.create()
    assert tree is not None
    try:
        command = tree.new_command(pids_max=64, memory_max=1 << 30)
        _, entries = command.spawn_fds()
        assert [os.readlink(f"/proc/self/fd/{fd}") for fd in entries] == [
            os.path.join(path, "tasks") for path in command.limit_paths
        ]
        v1_groups = len(command.limit_paths)  # a command's v1 limit groups on this host
        command.remove()
    finally:
        tree.remove()
    in_v1 = [ctls for hid, ctls, path in lines if hid != "0" and path.split("/")[-2:] == group]
    assert len(in_v1) == v1_groups, lines


async def test_the_policy_kill_grace_is_the_managers(tmp_path: Path) -> None:
    """A command that ignores SIGTERM dies at the policy's grace (0 here), not the 1 s default."""
    marker = new_marker()
    broker = _broker(tmp_path, kill_grace=0)
    try:
        start = time.monotonic()
        result = await broker.exec(
            "trap '' TERM; echo up; sleep 1000",
            str(tmp_path),
            on_data=lambda _: None,
            timeout=0.2,
            env=marked_env(marker),
        )
        elapsed = time.monotonic() - start
    finally:
        await broker.aclose()
    assert result == ExecResult(None, KillReason.TIMEOUT)
    assert survivors(marker) == []
    assert elapsed < 0.2 + 0.8  # with the default grace it takes at least 1.2 s


async def _flood(ctx: CommandContext) -> int:
    for _ in range(1_000_000):
        await ctx.emit(b"y\n" * 512)
    return 0


async def _wait(ctx: CommandContext) -> int:
    await ctx.emit("up\n")
    await ctx.sleep(1000)
    return 0


@pytest.fixture(params=["memory", "local"])
async def guarded(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[GuardedBackend, ListAudit]]:
    audit = ListAudit()
    policy = Policy.from_mapping({"exec": {"max_output_bytes": 100_000, "kill_grace": 0.2}})
    inner: InMemoryOperations | Broker
    if request.param == "memory":
        inner = InMemoryOperations(root=str(tmp_path))
        inner.commands.register("yes", _flood)
        inner.commands.register("echo up; sleep 1000", _wait)
    else:
        inner = Broker(str(tmp_path), exec_policy=policy.exec)
    async with inner:
        yield GuardedBackend(inner, policy, audit=audit, close_inner=False), audit


async def test_the_output_limit_is_one_reason_from_kill_to_audit(
    guarded: tuple[GuardedBackend, ListAudit], tmp_path: Path
) -> None:
    guard, audit = guarded
    received = bytearray()
    result = await guard.exec("yes", str(tmp_path), on_data=received.extend, timeout=20)
    assert result == ExecResult(None, KillReason.OUTPUT_LIMIT)
    assert len(received) == 100_000
    assert audit.events[-1]["kill_reason"] == "output_limit"
    assert audit.events[-1]["bytes_out"] == 100_000


@pytest.mark.parametrize("reason", [KillReason.SHUTDOWN, KillReason.ABORTED])
async def test_an_abort_reason_is_the_result_and_the_audit(
    guarded: tuple[GuardedBackend, ListAudit], tmp_path: Path, reason: KillReason
) -> None:
    """A front-end that stops a command for shutdown says so once, on the signal: the result
    and the audit line carry it with no layer rewriting ABORTED."""
    guard, audit = guarded
    controller = AbortController()

    def started(data: bytes) -> None:
        controller.abort(reason)

    result = await guard.exec(
        "echo up; sleep 1000", str(tmp_path), on_data=started, signal=controller.signal, timeout=20
    )
    assert result == ExecResult(None, reason)
    assert audit.events[-1]["kill_reason"] == reason.value
