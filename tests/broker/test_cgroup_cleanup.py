"""No command outlives its broker, even one that never closed its manager or was killed.

A broker killed with SIGKILL cannot clean up: its commands keep running in its cgroups. The next
manager to start kills them and removes the groups (the group name says which process owned it).
A manager that is never closed does the same for itself when the interpreter exits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from broker._cgroup import RMDIR_RETRY_S, CgroupTree

from ._procscan import all_gone, kill_and_reap, new_marker, survivors
from .conftest import CGROUPS

pytestmark = pytest.mark.skipif(not CGROUPS, reason="needs a writable cgroup v2 tree")

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 10.0

# A broker process: runs `sleep` with the marker, prints its command's cgroup, then either
# waits to be killed or exits without closing the manager.
BROKER = textwrap.dedent(
    """
    import asyncio, sys
    from broker._process import ProcessManager

    async def main(marker, then):
        pm = ProcessManager(use_cgroups=True)
        env = {"PATH": "/usr/bin:/bin", "OPSBROKER_TEST_MARK": marker}
        out = []
        task = asyncio.create_task(
            pm.exec(["sh", "-c", "cat /proc/self/cgroup; exec sleep 1000"], cwd="/",
                    on_data=out.append, env=env)
        )
        while b"0::" not in b"".join(out):
            await asyncio.sleep(0.01)
        line = next(l for l in b"".join(out).decode().splitlines() if l.startswith("0::"))
        print(line[3:], flush=True)
        if then == "wait":
            await asyncio.sleep(1000)
        return task

    # Exit with the command still running and its task never cancelled (asyncio.run would
    # cancel it, and the cancellation would kill the tree): only the exit-time cleanup is left.
    loop = asyncio.new_event_loop()
    running = loop.run_until_complete(main(sys.argv[1], sys.argv[2]))
    sys.exit(0)
    """
)


def _start_broker(marker: str, then: str) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'proto'}"}
    proc = subprocess.Popen(
        [sys.executable, "-c", BROKER, marker, then], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    rel = proc.stdout.readline().strip()
    assert rel, "the broker did not start its command"
    return proc, rel


def _group_dir(rel: str) -> Path:
    tree = CgroupTree.create()
    assert tree is not None
    try:
        mount = tree.path[: len(tree.path) - len(tree.rel)]
    finally:
        tree.remove()
    return Path(mount + rel).parent  # the broker's group, parent of its command's


def test_a_new_manager_kills_what_a_killed_broker_left() -> None:
    marker = new_marker()
    proc, rel = _start_broker(marker, "wait")
    try:
        assert survivors(marker)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=WAIT_S)
        group = _group_dir(rel)  # CgroupTree.create() ran: it purged the orphan
        # The killed broker's command was still running until then; now it is gone.
        assert all_gone(marker), survivors(marker)
        assert not group.exists()
    finally:
        kill_and_reap(proc)


def test_a_manager_never_closed_cleans_up_at_exit() -> None:
    marker = new_marker()
    proc, rel = _start_broker(marker, "exit")
    try:
        assert proc.wait(timeout=WAIT_S) == 0
        assert not survivors(marker)
        # Found without creating a manager (which would purge it anyway): the parent of the
        # command's group, under the mount our own process's group is in.
        assert not any(Path(m, rel.lstrip("/")).parent.exists() for m in _mounts())
    finally:
        kill_and_reap(proc)


def test_the_groups_of_a_live_manager_are_left_alone() -> None:
    first = CgroupTree.create()
    assert first is not None
    try:
        second = CgroupTree.create()
        assert second is not None
        second.remove()
        assert os.path.isdir(first.path)
    finally:
        first.remove()


def _mounts() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if " - cgroup2 " in line]


def test_an_empty_command_group_is_reused_and_an_occupied_one_is_not() -> None:
    tree = CgroupTree.create()
    assert tree is not None
    try:
        first = tree.new_command(pids_max=64, memory_max=None)
        first.release()
        assert os.path.isdir(first.path)  # pooled, not removed
        again = tree.new_command(pids_max=64, memory_max=None)
        assert again is first
        other = tree.new_command(pids_max=None, memory_max=None)
        assert other.path != first.path  # other limits: a group of its own
        other.release()
        child = subprocess.Popen(["sleep", "1000"], stdin=subprocess.DEVNULL)
        try:
            with open(os.path.join(again.path, "cgroup.procs"), "w") as f:
                f.write(str(child.pid))
            started = time.monotonic()
            again.release()  # occupied: neither pooled nor removable yet, and no wait for it
            assert time.monotonic() - started < RMDIR_RETRY_S
            assert os.path.isdir(again.path)
            fresh = tree.new_command(pids_max=64, memory_max=None)
            assert fresh is not again
        finally:
            kill_and_reap(child)
        deadline = time.monotonic() + 5
        while os.path.isdir(again.path) and time.monotonic() < deadline:
            fresh.release()  # each release retries the busy group once
            fresh = tree.new_command(pids_max=64, memory_max=None)
            time.sleep(0.01)
        assert not os.path.exists(again.path)  # removed once empty, by a later release
        fresh.release()
    finally:
        tree.remove()
    assert not os.path.exists(tree.path)
