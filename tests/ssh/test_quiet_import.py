"""Importing the SSH client, the SSH front-end or the command line prints no warning.

asyncssh names cryptography's DSA classes as it imports, and cryptography 51 and later warns at
each name. The wire package hides that one warning (``opsbroker/__init__.py``), and each of
these entry points imports it before asyncssh; every other warning still shows (``-W default``).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.cli._run import REPO, cli_env


@pytest.mark.parametrize(
    "module", ["agent_side._remote.ssh", "broker._frontends.ssh", "opsbroker.cli"]
)
def test_importing_prints_no_warning(module: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-W", "default", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
