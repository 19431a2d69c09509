"""``opsbroker call`` writes a command's output as it comes, and a closed stdout (``| head -1``)
never turns a failed ``call`` or ``run`` into exit status 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ._run import COMMAND_TIMEOUT_S, REPO, cli_env

GAP_S = 1.0  # between the command's lines: far above a line's trip through the loop


def _popen(*args: str, stdout: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "opsbroker", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        env=cli_env(),
        cwd=REPO,
    )


def test_call_bash_streams_each_line_as_it_is_printed(tmp_path: Path) -> None:
    command = f"for i in 1 2 3; do echo line-$i; sleep {GAP_S}; done; echo done"
    arrivals = []
    with _popen("call", f"local:{tmp_path}", "bash", json.dumps({"command": command}),
                stdout=subprocess.PIPE) as proc:  # fmt: skip
        assert proc.stdout is not None
        try:
            for _ in range(10):  # 4 lines and the end; bounded in case of extra lines
                line = proc.stdout.readline()
                if not line:
                    break
                arrivals.append((time.monotonic(), line.decode()))
            status = proc.wait(timeout=COMMAND_TIMEOUT_S)
        finally:
            proc.kill()
    assert status == 0
    assert [text for _, text in arrivals] == ["line-1\n", "line-2\n", "line-3\n", "done\n"]
    # Before the fix all four came at once, at the end; now line-1 is out a gap before line-3.
    assert arrivals[2][0] - arrivals[0][0] >= GAP_S


def _batch(tmp_path: Path) -> Path:
    calls = [
        {"type": "toolCall", "id": "ok_1", "name": "ls", "arguments": {}},
        {"type": "toolCall", "id": "bad_1", "name": "read", "arguments": {"path": "missing-1"}},
        {"type": "toolCall", "id": "ok_2", "name": "ls", "arguments": {}},
        {"type": "toolCall", "id": "bad_2", "name": "read", "arguments": {"path": "missing-2"}},
    ]
    path = tmp_path / "batch.json"
    path.write_text(json.dumps({"role": "assistant", "content": calls}))
    return path


def _with_closed_stdout(*args: str) -> tuple[int, str]:
    """Run ``opsbroker ARGS`` with a stdout pipe nobody reads (closed before the first write)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = _popen(*args, stdout=write_end)
    finally:
        os.close(write_end)
    with proc:
        _, err = proc.communicate(timeout=COMMAND_TIMEOUT_S)
    return proc.returncode, err.decode()


def test_run_with_a_closed_stdout_still_reports_the_failures(tmp_path: Path) -> None:
    for mode in ([], ["--json"]):
        status, err = _with_closed_stdout("run", "memory:", str(_batch(tmp_path)), *mode)
        assert status == 1, err
        assert "opsbroker run: 2 of 4 tool calls failed: bad_1 (read), bad_2 (read)" in err
        assert "Traceback" not in err


def test_call_with_a_closed_stdout_keeps_its_status(tmp_path: Path) -> None:
    status, err = _with_closed_stdout("call", "memory:", "read", '{"path": "missing"}')
    assert (status, err) == (1, "")
    status, err = _with_closed_stdout("call", "memory:", "ls", "{}")
    assert (status, err) == (0, "")
