"""``scripts/demo`` end to end, as a newcomer runs it (with this interpreter instead of a new venv).

Checks its key lines: the batches over gRPC succeed, every escape attempt is refused with the
outside tree unchanged, the command tree is killed at its timeout with 0 processes left behind,
the audit chain verifies intact, and the demo removes its scratch directory and stops its broker.
SSH and the audit log are checked when this build's ``opsbroker serve`` offers them; otherwise
the demo must say that they are not available (and this test checks that it does).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from ._run import REPO, cli_env, opsbroker

DEMO_TIMEOUT_S = 300  # the demo takes well under a minute; a hang must not stall the suite


def _serve_help() -> str:
    proc = opsbroker("serve", "--help")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_demo_end_to_end(tmp_path: Path) -> None:
    env = cli_env()
    env["OPSBROKER_DEMO_PYTHON"] = sys.executable
    env["TMPDIR"] = str(tmp_path)
    proc = subprocess.run(
        [str(REPO / "scripts" / "demo")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=DEMO_TIMEOUT_S,
        check=False,
    )
    out = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout)
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-4000:]
    assert "Traceback" not in out + proc.stderr
    # nor a Python warning ("FILE:LINE: SomeWarning: ..."): a newcomer's first run shows no noise
    assert not re.search(r"^\S+:\d+: \w*Warning: ", out + proc.stderr, re.M)

    for header in ("1. Environment", "3. Starting the broker", "4. Tool calls over gRPC",
                   "6. Escape attempts", "7. A command tree killed at its timeout",
                   "8. The audit trail", "Done"):  # fmt: skip
        assert f"== {header}" in out

    assert "RESULT gRPC: explore and fix batches succeeded" in out
    for tool in ("read", "ls", "grep", "find", "bash", "edit"):
        assert re.search(rf"^end     \[\w+\] {tool} ok ", out, re.M), tool
    assert "FAILED (failures=1)" in out  # the tests fail before the fix...
    assert re.search(r"^    \| OK$", out, re.M)  # ...and pass after it
    assert re.search(r"^running \[bash_3\] bash ", out, re.M)  # progress of a slow command

    assert (
        "RESULT escape: refused (5 of 5 attempts), secret not shown, outside tree unchanged" in out
    )
    assert "the broker must never show this" not in out

    assert "Command timed out after 2 seconds" in out
    during = re.search(r"while it runs: (\d+) processes", out)
    assert during is not None and int(during.group(1)) >= 3
    assert "after the timeout: 0 processes" in out
    assert "RESULT timeout: command tree killed at 2s; processes left behind: 0" in out

    serve_help = _serve_help()
    if "--ssh-authorized-keys" in serve_help:
        assert "RESULT SSH: review batch succeeded" in out
    else:
        assert "RESULT SSH: not available in this build" in out
    if "--audit-log" in serve_help:
        assert re.search(r"RESULT audit: chain intact \(\d+ records\)", out)
        assert re.search(r"^intact: \d+ lines", out, re.M)  # opsbroker audit verify's own line
        # the refusals are in the trail, under the principal and transport that attempted them
        escape_transport = "ssh" if "--ssh-authorized-keys" in serve_help else "grpc"
        assert re.search(rf"^\S+ +\S+ +{escape_transport} +access +deny ", out, re.M)
    else:
        assert "RESULT audit: not available in this build" in out

    # It cleaned up: the scratch directory is gone and the broker has stopped.
    scratch = re.search(r"removing (\S+)", out)
    assert scratch is not None and scratch.group(1).startswith(str(tmp_path))
    assert not Path(scratch.group(1)).exists()
    assert re.search(r"broker PID (\d+)", out)
    # No process of the demo is left: found by /proc, not by the PID the demo printed.
    assert _processes_naming(tmp_path) == []


def _processes_naming(path: Path) -> list[str]:
    """Command lines of live processes that mention ``path`` (the demo's scratch directory)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if str(path).encode() in cmdline and state != b"Z":
            found.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return found
