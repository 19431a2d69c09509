"""``scripts/test`` prints its checks, not pip's: the install's output goes to a log, shown only
when the install fails. Run on a copy of the script whose ``.venv`` holds fakes, so nothing is
installed and no check really runs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ._run import COMMAND_TIMEOUT_S, REPO

# What pip 26 prints for this project with --quiet: the build backend's warnings.
PIP_NOISE = """\
  /tmp/pip-build-env/overlay/lib/python3.11/site-packages/setuptools/config/pyprojecttoml.py:72: BuildBackendWarning: `[tool.setuptools.ext-modules]` in `pyproject.toml` is still *experimental* and likely to change in future releases.
    config = read_configuration(filepath, True, ignore_option_errors, dist)
  /tmp/pip-build-env/overlay/lib/python3.11/site-packages/setuptools/command/editable_wheel.py:354: BuildBackendWarning: Editable installation.
"""


def _fake_checkout(tmp_path: Path, pip_status: int) -> Path:
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "test", checkout / "scripts" / "test")
    bin_dir = checkout / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (tmp_path / "noise.txt").write_text(PIP_NOISE)
    fakes = {
        "python": f'if [ "$2" = pip ]; then cat {tmp_path}/noise.txt >&2; exit {pip_status}; fi\n'
        'echo "pytest ran${OPSBROKER_TEST_LOOP:+ on $OPSBROKER_TEST_LOOP}: $*"\n',
        "ruff": "exit 0\n",
        "mypy": "exit 0\n",
    }
    for name, body in fakes.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    return checkout


def _run(checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(checkout / "scripts" / "test"), *args],
        env={k: v for k, v in os.environ.items() if k != "OPSBROKER_TEST_LOOP"},
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def test_a_successful_install_prints_nothing_before_the_first_check(tmp_path: Path) -> None:
    proc = _run(_fake_checkout(tmp_path, pip_status=0))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.startswith("== ruff check\n"), proc.stdout
    assert proc.stdout.endswith(
        "== pytest\npytest ran: -m pytest\n"
        "== pytest on asyncio's event loop: tests/conformance tests/broker\n"
        "pytest ran on asyncio: -m pytest tests/conformance tests/broker\n"
    ), proc.stdout


def test_arguments_go_to_one_pytest_run(tmp_path: Path) -> None:
    proc = _run(_fake_checkout(tmp_path, pip_status=0), "-k", "conformance")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith("== pytest\npytest ran: -m pytest -k conformance\n"), proc.stdout


def test_a_failed_install_shows_its_log_and_stops(tmp_path: Path) -> None:
    checkout = _fake_checkout(tmp_path, pip_status=1)
    proc = _run(checkout)
    assert proc.returncode == 1
    assert "BuildBackendWarning" in proc.stderr
    assert proc.stderr.endswith(
        "scripts/test: installing the project failed; the whole log is .venv/install.log\n"
    )
    assert "== ruff check" not in proc.stdout
    assert (checkout / ".venv" / "install.log").read_text().startswith(PIP_NOISE[:40])
