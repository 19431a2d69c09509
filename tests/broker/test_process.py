"""ProcessManager basics: exit codes, merged output, environment, working directory, timeouts,
abort, task cancellation and shutdown, each taking the one kill path and leaving nothing behind."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from broker import _tracker_proc
from broker._process import MINIMAL_ENV, ProcessManager
from broker._proctree import COOKIE_VAR, is_child_subreaper
from broker._shell import bash_argv
from broker._tracker_cgroup import CgroupTracker
from operations import (
    AbortController,
    ExecResult,
    InvalidArgument,
    KillReason,
    NotFound,
    Unavailable,
)

from ._procscan import marked_env, new_marker, open_fds, survivors
from .conftest import TEST_KILL_GRACE_S, make_manager

pytestmark = pytest.mark.anyio  # see test_process_escape.py

SLACK_S = 1.0


async def run(pm: ProcessManager, command: str, **kwargs: object) -> tuple[ExecResult, bytes]:
    output: list[bytes] = []
    kwargs.setdefault("cwd", "/")
    result = await pm.exec(bash_argv(command), on_data=output.append, **kwargs)  # type: ignore[arg-type]
    return result, b"".join(output)


async def test_exit_code_and_merged_output(manager: ProcessManager) -> None:
    result, out = await run(manager, "echo out; echo err >&2; echo out2; exit 7")
    assert result == ExecResult(7)
    assert out == b"out\nerr\nout2\n"


async def test_signal_death_not_caused_by_broker_has_no_exit_code(manager: ProcessManager) -> None:
    result, _ = await run(manager, "kill -KILL $$")
    assert result == ExecResult(None, signal=signal.SIGKILL)  # null exit code, the signal named


async def test_environment_is_exactly_the_callers_plus_cookie(manager: ProcessManager) -> None:
    output: list[bytes] = []
    result = await manager.exec(
        ["/usr/bin/env"], cwd="/", on_data=output.append, env={"ONLY": "this"}
    )
    assert result == ExecResult(0)
    lines = sorted(b"".join(output).decode().splitlines())
    assert len(lines) == 2
    assert lines[0] == "ONLY=this"
    assert lines[1].startswith(f"{COOKIE_VAR}=")


async def test_each_command_gets_its_own_environment_and_cookie(manager: ProcessManager) -> None:
    """The same environment twice, then another: each command sees exactly its own, and a
    cookie the caller sets is replaced by the broker's, which names each command apart."""

    async def environment(env: dict[str, str]) -> dict[str, str]:
        output: list[bytes] = []
        result = await manager.exec(["/usr/bin/env"], cwd="/", on_data=output.append, env=env)
        assert result == ExecResult(0)
        lines = b"".join(output).decode().splitlines()
        assert len(lines) == len({line.split("=", 1)[0] for line in lines})  # no name twice
        return dict(line.split("=", 1) for line in lines)

    spoofed = {"A": "1", COOKIE_VAR: "the-callers"}
    first, second = await environment(spoofed), await environment(dict(spoofed))
    third = await environment({"A": "2"})
    assert [e["A"] for e in (first, second, third)] == ["1", "1", "2"]
    assert all(set(e) == {"A", COOKIE_VAR} for e in (first, second, third))
    cookies = {e[COOKIE_VAR] for e in (first, second, third)}
    assert len(cookies) == 3 and "the-callers" not in cookies


async def test_default_environment_is_minimal_not_the_brokers(
    manager: ProcessManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BROKER_SECRET_TOKEN", "s3cret")
    output: list[bytes] = []
    await manager.exec(["/usr/bin/env"], cwd="/", on_data=output.append)
    names = {line.split("=", 1)[0] for line in b"".join(output).decode().splitlines()}
    assert names == {*MINIMAL_ENV, COOKIE_VAR}


async def test_cwd_fd_is_used_even_after_rename(manager: ProcessManager, tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        workdir.rename(tmp_path / "moved")
        result, out = await run(manager, "pwd -P", cwd=str(workdir), cwd_fd=fd)
    finally:
        os.close(fd)
    assert result == ExecResult(0)
    assert out == f"{tmp_path / 'moved'}\n".encode()


async def test_missing_cwd_and_program(manager: ProcessManager, tmp_path: Path) -> None:
    with pytest.raises(NotFound) as info:
        await run(manager, "true", cwd=str(tmp_path / "absent"))
    assert info.value.path == str(tmp_path / "absent")
    with pytest.raises(NotFound):
        await manager.exec([str(tmp_path / "no-such-program")], cwd="/", on_data=lambda _: None)


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, 2147483.648])
async def test_invalid_timeouts(manager: ProcessManager, bad: float) -> None:
    with pytest.raises(InvalidArgument, match="Invalid timeout"):
        await run(manager, "true", timeout=bad)


async def test_timeout_returns_within_timeout_plus_grace(manager: ProcessManager) -> None:
    marker = new_marker()
    start = time.monotonic()
    result, _ = await run(manager, "yes > /dev/null", timeout=0.3, env=marked_env(marker))
    assert result == ExecResult(None, KillReason.TIMEOUT)
    assert time.monotonic() - start < 0.3 + TEST_KILL_GRACE_S + SLACK_S
    assert survivors(marker) == []


async def test_abort_signal_kills_tree(manager: ProcessManager) -> None:
    marker = new_marker()
    controller = AbortController()
    loop = asyncio.get_running_loop()
    loop.call_later(0.2, controller.abort)
    result, _ = await run(
        manager,
        "sleep 1000 & setsid sleep 1000 & wait",
        signal=controller.signal,
        env=marked_env(marker),
    )
    assert result == ExecResult(None, KillReason.ABORTED)
    assert survivors(marker) == []


async def test_already_aborted_signal_starts_nothing(
    manager: ProcessManager, tmp_path: Path
) -> None:
    controller = AbortController()
    controller.abort()
    flag = tmp_path / "ran"
    result, _ = await run(manager, f"touch {flag}", signal=controller.signal)
    assert result == ExecResult(None, KillReason.ABORTED)
    assert not flag.exists()


async def test_task_cancellation_kills_tree_then_reraises(manager: ProcessManager) -> None:
    marker = new_marker()
    task = asyncio.create_task(
        run(manager, "setsid sleep 1000 & trap '' TERM; sleep 1000", env=marked_env(marker))
    )
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert survivors(marker) == []


async def test_asyncio_timeout_around_exec(manager: ProcessManager) -> None:
    marker = new_marker()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            await run(manager, "sleep 1000", env=marked_env(marker))
    assert survivors(marker) == []


async def test_second_cancellation_does_not_cut_cleanup_short(manager: ProcessManager) -> None:
    marker = new_marker()
    task = asyncio.create_task(run(manager, "trap '' TERM; sleep 1000", env=marked_env(marker)))
    await asyncio.sleep(0.2)
    task.cancel()
    await asyncio.sleep(0.05)  # inside the SIGTERM grace
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert survivors(marker) == []


async def test_shutdown_kills_running_commands(mode: str) -> None:
    pm = make_manager(mode)
    marker = new_marker()
    tasks = [
        asyncio.create_task(run(pm, "setsid sleep 1000 & sleep 1000", env=marked_env(marker)))
        for _ in range(3)
    ]
    await asyncio.sleep(0.2)
    await pm.aclose()
    results = [(await t)[0] for t in tasks]
    assert results == [ExecResult(None, KillReason.SHUTDOWN)] * 3
    assert survivors(marker) == []
    with pytest.raises(Unavailable):
        await run(pm, "true")


async def test_idle_grace_rearmed_per_chunk(mode: str) -> None:
    """Chunks that keep coming after the shell exits are all read, as long as each gap is under
    the idle grace (reference regression #5303; times scaled up for a loaded machine)."""
    pm = make_manager(mode, idle_grace=0.3)
    command = "(for i in 1 2 3 4 5 6; do sleep 0.1; echo $i; done) & exit 0"
    try:
        result, out = await run(pm, command)
    finally:
        await pm.aclose()
    assert result == ExecResult(0)
    assert out == b"1\n2\n3\n4\n5\n6\n"  # 0.6 s of output, twice the grace


async def test_output_still_draining_at_exit_ends_the_call_at_its_end(mode: str) -> None:
    """The shell exits with output still in the pipe (a consumer slower than ``head``): the call
    returns as the pipe reaches its end, not an idle grace after the last chunk."""
    pm = make_manager(mode, idle_grace=5.0)
    last = 0.0

    async def slow(chunk: bytes) -> None:
        nonlocal last
        await asyncio.sleep(0.002)
        last = time.monotonic()

    try:
        result = await pm.exec(bash_argv("head -c 8388608 /dev/zero"), cwd="/", on_data=slow)
        returned = time.monotonic()
    finally:
        await pm.aclose()
    assert result == ExecResult(0)
    assert returned - last < 2.5  # the grace was 5 s: waited out before the fix


async def test_a_consumer_slower_than_the_idle_grace_still_gets_all_output(mode: str) -> None:
    """Output still in the pipe when the shell exits is delivered however long ``on_data``
    takes: a consumer holding the pump (backpressure) is not output going quiet. Before the
    fix, whatever was in the pipe when ``on_data`` outlasted the grace was dropped."""
    pm = make_manager(mode, idle_grace=0.1)
    size = 900_000  # fits the pipe: the shell exits while the first chunk is being handled
    got: list[bytes] = []

    async def slow(chunk: bytes) -> None:
        got.append(chunk)
        if len(got) == 1:
            await asyncio.sleep(0.6)  # six idle graces, after the shell has exited

    try:
        result = await pm.exec(bash_argv(f"head -c {size} /dev/zero"), cwd="/", on_data=slow)
    finally:
        await pm.aclose()
    assert result == ExecResult(0)
    assert len(b"".join(got)) == size


async def test_quiet_stdout_holder_released_after_idle_grace(manager: ProcessManager) -> None:
    start = time.monotonic()
    result, out = await run(manager, "sleep 1000 & echo started")
    assert result == ExecResult(0)
    assert out == b"started\n"
    assert time.monotonic() - start < 0.1 + TEST_KILL_GRACE_S + SLACK_S


LEAK_CALLS = 300


async def test_no_fd_task_or_cgroup_leak_over_many_calls(manager: ProcessManager) -> None:
    await run(manager, "true")
    fds, tasks = open_fds(), len(asyncio.all_tasks())
    tree = manager._tracker.cgroups if isinstance(manager._tracker, CgroupTracker) else None
    cgroups = sorted(os.listdir(tree.path)) if tree is not None else []
    for _ in range(LEAK_CALLS):
        result, _ = await run(manager, "echo x")
        assert result == ExecResult(0)
    for _ in range(5):
        result, _ = await run(manager, "sleep 1000", timeout=0.05)
        assert result.kill_reason is KillReason.TIMEOUT
    assert open_fds() == fds
    assert len(asyncio.all_tasks()) == tasks
    assert not manager._runs
    if tree is not None:
        assert sorted(os.listdir(tree.path)) == cgroups  # no cmd-* group left


async def test_concurrent_commands_are_independent(manager: ProcessManager) -> None:
    marker = new_marker()
    slow = asyncio.create_task(run(manager, "sleep 1000", timeout=0.5, env=marked_env(marker)))
    fast = [await run(manager, f"echo {i}") for i in range(3)]
    assert [r for r, _ in fast] == [ExecResult(0)] * 3
    assert (await slow)[0] == ExecResult(None, KillReason.TIMEOUT)
    assert survivors(marker) == []


def test_background_ttl_is_reserved() -> None:
    with pytest.raises(ValueError, match="background_ttl"):
        ProcessManager(background_ttl=5.0)


async def test_on_data_error_kills_tree_and_propagates(manager: ProcessManager) -> None:
    marker = new_marker()

    def failing(data: bytes) -> None:
        raise ValueError("consumer broke")

    with pytest.raises(ValueError, match="consumer broke"):
        await manager.exec(
            bash_argv("setsid sleep 1000 & echo x; sleep 1000"),
            cwd="/",
            on_data=failing,
            env=marked_env(marker),
        )
    assert survivors(marker) == []


async def test_memory_limit(mode: str) -> None:
    """With cgroups, ``memory_max`` holds a command to its limit (the kernel OOM-kills it)."""
    pm = make_manager(mode, memory_max=64 * 1024 * 1024)
    command = f"{sys.executable} -c 'x = bytearray(300 << 20)'; echo rc=$?"
    try:
        result, out = await run(pm, command, timeout=30)
        enforced = "memory" in pm.capabilities().limits
    finally:
        await pm.aclose()
    assert result == ExecResult(0)
    assert enforced == mode.startswith("cgroup")
    assert out.endswith(b"rc=137\n" if enforced else b"rc=0\n")


def _zombie_children() -> set[int]:
    me, found = os.getpid(), set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    raw = f.read()
            except OSError:
                continue
            fields = raw[raw.rfind(b")") + 2 :].split()
            if fields[0] == b"Z" and int(fields[1]) == me:
                found.add(int(name))
    return found


async def test_fallback_reaps_adopted_orphans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Orphans re-parented to the broker (subreaper) do not pile up as zombies, including a
    ``setsid`` one that exits on its own before any sweep sees it alive."""
    monkeypatch.setattr(_tracker_proc, "STALE_ZOMBIE_S", 0.2)
    pm = make_manager("fallback")
    assert pm.capabilities().subreaper
    before = _zombie_children()
    try:
        for command in ["(sleep 0.02 &); exit 0", "(setsid sleep 0.02 &); exit 0"]:
            await run(pm, command)
        await asyncio.sleep(0.3)
        await run(pm, "true")  # the next command's end reaps what has aged
    finally:
        await pm.aclose()
    assert _zombie_children() - before == set()


async def test_no_zombies_left_while_the_broker_is_subreaper(mode: str) -> None:
    """While the subreaper flag is on (any fallback manager open), killed trees re-parent to the
    broker as they die; every mode reaps them, and the flag goes off with the last manager."""
    was_subreaper = is_child_subreaper()
    holder = make_manager("fallback")  # turns the flag on for the whole process
    pm = make_manager(mode)
    before = _zombie_children()
    try:
        assert is_child_subreaper()
        for command, timeout in [
            ("sleep 1000 & sleep 1000 & (sleep 1000 & wait) & wait", 0.3),
            ("setsid sleep 1000 & sleep 1000 & echo x", None),
            ("( setsid sh -c 'sleep 1000' & ); exit 0", None),
            ("(sleep 1000 & sleep 1000 & wait) & sleep 0.1; kill -9 $$", None),
        ]:
            await run(pm, command, timeout=timeout)
        assert _zombie_children() - before == set()
    finally:
        await pm.aclose()
        await holder.aclose()
    assert is_child_subreaper() == was_subreaper
