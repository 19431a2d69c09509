"""Usage errors of ``opsbroker`` itself and of every subcommand: one line on stderr, argparse's
exit status 2, never a usage block or a traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata

import pytest

from ._run import COMMAND_TIMEOUT_S, cli_env, opsbroker

EXIT_USAGE = 2


@pytest.mark.parametrize(
    ("argv", "prefix", "expected"),
    [
        ([], "opsbroker: error: ", "required: COMMAND"),
        (["nosuchcommand"], "opsbroker: error: ", "invalid choice: 'nosuchcommand'"),
        (["--bogus"], "opsbroker: error: ", "required: COMMAND"),
        (["call", "memory:", "ls", "{}", "--bogus"], "opsbroker call: ", "unrecognized arguments"),
        (["call"], "opsbroker call: ", "required: URL, TOOL"),
        (["call", "memory:", "ls", "--connect-timeout", "soon"], "opsbroker call: ", "soon"),
        (["run", "memory:"], "opsbroker run: ", "required"),
        (["run", "memory:", "-", "--bogus"], "opsbroker run: ", "unrecognized arguments"),
        (["serve", "--bogus"], "opsbroker serve: error: ", "unrecognized arguments: --bogus"),
        (["serve", "--root"], "opsbroker serve: error: ", "expected one argument"),
        (["audit"], "opsbroker audit: error: ", "required"),
        (["audit", "nope"], "opsbroker audit: error: ", "invalid choice: 'nope'"),
        (["audit", "verify"], "opsbroker audit verify: error: ", "required"),
        (["audit", "verify", "x", "--bogus"], "opsbroker audit: error: ", "--bogus"),
    ],
)
def test_usage_errors_are_one_line_with_status_2(
    argv: list[str], prefix: str, expected: str
) -> None:
    proc = opsbroker(*argv)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert proc.returncode == EXIT_USAGE, (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(prefix), lines[0]
    assert expected in lines[0], lines[0]
    assert "--help" in lines[0]  # and says where to look


def test_help_still_prints_the_usage_and_exits_0() -> None:
    proc = opsbroker("--help")
    assert proc.returncode == 0 and "usage: opsbroker" in proc.stdout
    for command in ("serve", "call", "run", "audit"):
        assert command in proc.stdout


def test_version_names_the_installed_release() -> None:
    proc = opsbroker("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"opsbroker {metadata.version('opsbroker')}\n"


def test_python_dash_m_opsbroker_is_the_command_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "opsbroker", "--help"],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: opsbroker ")
    for command in ("serve", "call", "run", "audit", "mcp"):
        assert re.search(rf"^ +{command} ", proc.stdout, re.M), command
