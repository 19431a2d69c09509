"""Survivor checks that trust nothing but ``/proc``: processes are found by an environment marker
the test puts in the command's environment, never by asking the process manager."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid

MARK_VAR = "OPSBROKER_TEST_MARK"


def new_marker() -> str:
    return uuid.uuid4().hex


def marked_env(marker: str) -> dict[str, str]:
    """A small command environment that carries ``marker``."""
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
        MARK_VAR: marker,
    }


def _alive(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return False
    return raw[raw.rfind(b")") + 2 :][:1] not in (b"Z", b"X", b"x")


def survivors(marker: str) -> list[int]:
    """Pids of live processes whose environment carries ``marker`` (a full ``/proc`` scan)."""
    needle = f"{MARK_VAR}={marker}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if needle in environ.split(b"\0") and _alive(name):
            found.append(int(name))
    return found


def rss_bytes() -> int:
    """This process's resident set size now."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def survivors_by_cmdline(needle: str) -> list[int]:
    """Pids of live processes whose argv contains ``needle`` (finds processes that scrubbed their
    environment, e.g. ``env -i``)."""
    want = needle.encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if want in argv and _alive(name):
            found.append(int(name))
    return found


def all_gone(marker: str, within: float = 10.0) -> bool:
    """Whether every process carrying ``marker`` is gone within ``within`` seconds (polled)."""
    deadline = time.monotonic() + within
    while survivors(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def kill_and_reap(proc: subprocess.Popen[str]) -> None:
    """SIGKILL ``proc`` if it still runs, reap it and close its stdout pipe."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def kill_pids(pids: list[int]) -> None:
    """SIGKILL ``pids``, reaping those that are this process's children."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
