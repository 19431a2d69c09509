"""Without cgroups too, no command outlives its broker: the cookie names the broker process.

A broker killed with SIGKILL leaves its commands running (re-parented away from it). The next
manager started without cgroups finds them by their cookie, whose owner is gone, and kills them;
a manager never closed kills its own at exit. Processes are found by scanning ``/proc`` for the
test's marker, never by asking the manager.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from broker._process import ProcessManager
from broker._proctree import COOKIE_VAR, owner_id, pid_namespace

from ._procscan import MARK_VAR, all_gone, kill_and_reap, kill_pids, new_marker, survivors

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 10.0
# A command whose tree has left its session: the double fork keeps only the cookie.
ESCAPING = "setsid sh -c 'sleep 1000' & sleep 1000"

# A broker without cgroups: starts ESCAPING with the marker, says so once both sleeps run,
# then waits to be killed or exits without closing its manager.
BROKER = textwrap.dedent(
    """
    import asyncio, sys
    from broker._process import ProcessManager
    from tests.broker._procscan import survivors

    async def main(marker, then, command):
        pm = ProcessManager(use_cgroups=False)
        env = {"PATH": "/usr/bin:/bin", "OPSBROKER_TEST_MARK": marker}
        task = asyncio.create_task(
            pm.exec(["sh", "-c", command], cwd="/", on_data=lambda _: None, env=env)
        )
        for _ in range(1000):
            if len(survivors(marker)) >= 4:  # sh, sleep, setsid's sh, its sleep
                break
            await asyncio.sleep(0.01)
        print("running", flush=True)
        if then == "wait":
            await asyncio.sleep(1000)
        return task

    # Exit with the command still running and its task never cancelled (asyncio.run would
    # cancel it, and the cancellation would kill the tree): only the exit-time cleanup is left.
    loop = asyncio.new_event_loop()
    running = loop.run_until_complete(main(*sys.argv[1:4]))
    sys.exit(0)
    """
)


def _start_broker(marker: str, then: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'proto'}"}
    proc = subprocess.Popen(
        [sys.executable, "-c", BROKER, marker, then, ESCAPING],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "running", "the broker did not start its command"
    return proc


def test_a_new_manager_kills_what_a_killed_broker_left() -> None:
    marker = new_marker()
    proc = _start_broker(marker, "wait")
    try:
        assert len(survivors(marker)) >= 4
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=WAIT_S)
        time.sleep(0.2)
        assert len(survivors(marker)) >= 4, "the killed broker's commands keep running..."
        pm = ProcessManager(use_cgroups=False)
        try:
            assert all_gone(marker), survivors(marker)  # ...until now
        finally:
            asyncio.run(pm.aclose())
    finally:
        kill_and_reap(proc)
        kill_pids(survivors(marker))


def test_a_manager_never_closed_kills_its_commands_at_exit() -> None:
    marker = new_marker()
    proc = _start_broker(marker, "exit")
    try:
        assert proc.wait(timeout=WAIT_S) == 0
        assert all_gone(marker), survivors(marker)
    finally:
        kill_and_reap(proc)
        kill_pids(survivors(marker))


def test_the_commands_of_a_live_broker_are_left_alone() -> None:
    marker = new_marker()
    proc = _start_broker(marker, "wait")
    try:
        before = sorted(survivors(marker))
        asyncio.run(ProcessManager(use_cgroups=False).aclose())
        time.sleep(0.2)
        assert sorted(survivors(marker)) == before
    finally:
        kill_and_reap(proc)  # SIGKILL: its commands are left, and cleaned below
        kill_pids(survivors(marker))


def test_a_broker_started_by_a_dead_brokers_command_spares_itself() -> None:
    """A broker run from a command carries that command's cookie; if the broker that ran it is
    gone, the new broker must not kill itself (or its parent) for it."""
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that names no process now
    cookie = f"{pid_namespace()}-{gone.pid}-1-0badc0de.{'0' * 32}"
    marker = new_marker()
    script = (
        "from broker._process import ProcessManager; import asyncio\n"
        "asyncio.run(ProcessManager(use_cgroups=False).aclose()); print('alive', flush=True)\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'proto'}",
        COOKIE_VAR: cookie,
        MARK_VAR: marker,
    }
    decoy = subprocess.Popen(["sleep", "1000"], env=env)  # not an ancestor: it goes
    try:
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.stdout.strip() == "alive", done.stderr
        assert decoy.wait(timeout=WAIT_S) == -signal.SIGKILL
    finally:
        if decoy.poll() is None:
            decoy.kill()
            decoy.wait()


def test_cookies_name_their_manager_and_this_process() -> None:
    pm = ProcessManager(use_cgroups=False)
    try:
        prefix = pm._tracker.cookie_prefix
        assert prefix.startswith(owner_id() + "-") and prefix.endswith(".")
    finally:
        asyncio.run(pm.aclose())
