"""A command can never signal or stop the broker.

The broker runs in a child process here, as a process-group leader (so ``kill -TERM -$PPID`` names
a real group), and the test watches it from outside: if a command stopped or killed it, the test
sees a stopped or dead process instead of its report.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from broker._shell import bash_argv
from broker._signal_scope import signal_scope
from operations import ExecResult, KillReason

from .conftest import MODES, make_manager

REPO = Path(__file__).resolve().parents[2]
BROKER_WAIT_S = 30.0

BROKER = """
import asyncio, json, sys
from broker._process import ProcessManager
from broker._shell import bash_argv

async def main():
    pm = ProcessManager(use_cgroups=sys.argv[1].startswith("cgroup"), kill_grace=0.2)
    report = {"scope": pm.capabilities().signal_scope, "results": []}
    for command in json.loads(sys.argv[2]):
        out = []
        r = await pm.exec(bash_argv(command), cwd="/", on_data=out.append, timeout=1.0)
        report["results"].append(
            [r.exit_code, r.kill_reason.value if r.kill_reason else None, b"".join(out).decode()]
        )
    await pm.aclose()
    print(json.dumps(report))

asyncio.run(main())
"""

OWN_GROUP = [
    ("sleep 1000 & kill -STOP 0", [None, "timeout"]),
    ("sleep 1000 & kill -9 0", [None, None]),
    ("kill -HUP 0", [None, None]),
]
BROKER_ITSELF = [
    ("kill -TERM -$PPID; echo rc=$?", [0, None, "rc=1\n"]),
    ("kill -STOP $PPID; echo rc=$?", [0, None, "rc=1\n"]),
    ("kill -9 $PPID; echo rc=$?", [0, None, "rc=1\n"]),
]


def run_broker(mode: str, commands: list[str]) -> dict[str, object]:
    proc = subprocess.Popen(
        [sys.executable, "-c", BROKER, mode, json.dumps(commands)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # a group leader, so -$PPID is a real target
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
    try:
        out, err = proc.communicate(timeout=BROKER_WAIT_S)
    except subprocess.TimeoutExpired:
        with open(f"/proc/{proc.pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"broker did not finish (state {state}): a command stopped or hung it")
    assert proc.returncode == 0, f"broker died: {proc.returncode} {err.decode()}"
    report: dict[str, object] = json.loads(out)
    return report


@pytest.mark.parametrize("mode", [m for m in MODES if not m.endswith("-unscoped")])
def test_commands_cannot_touch_the_broker(mode: str) -> None:
    scoped = signal_scope() is not None
    cases = OWN_GROUP + (BROKER_ITSELF if scoped else [])
    report = run_broker(mode, [command for command, _ in cases])
    assert report["scope"] == scoped
    results = report["results"]
    assert isinstance(results, list)
    for (command, want), got in zip(cases, results, strict=True):
        assert got[:2] == want[:2], command
        if len(want) > 2:
            assert got[2].endswith(want[2]), command  # after bash's "Operation not permitted"


pytestmark = pytest.mark.anyio  # see test_process_escape.py


async def test_commands_cannot_signal_each_other(mode: str) -> None:
    """Each scoped command has its own Landlock domain: it cannot signal another command."""
    pm = make_manager(mode)
    scoped = pm.capabilities().signal_scope
    first: list[bytes] = []
    started = asyncio.Event()

    def on_first(data: bytes) -> None:
        first.append(data)
        started.set()

    victim = asyncio.create_task(
        pm.exec(bash_argv("echo $$; exec sleep 1000"), cwd="/", on_data=on_first, timeout=20)
    )
    try:
        await asyncio.wait_for(started.wait(), 10)
        pid = int(b"".join(first).split()[0])
        out: list[bytes] = []
        result = await pm.exec(
            bash_argv(f"kill -9 {pid}; echo rc=$?"), cwd="/", on_data=out.append, timeout=10
        )
        assert result == ExecResult(0)
        assert b"".join(out).endswith(b"rc=1\n" if scoped else b"rc=0\n")
        if not scoped:  # the victim was SIGKILLed by the other command
            assert await asyncio.wait_for(victim, 10) == ExecResult(None, signal=signal.SIGKILL)
    finally:
        await pm.aclose()
    if scoped:  # untouched, until the shutdown
        assert await victim == ExecResult(None, KillReason.SHUTDOWN)
    assert scoped == (signal_scope() is not None and not mode.endswith("-unscoped"))
