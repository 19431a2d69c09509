"""Shell resolution (the reference's getShellConfig) and the PowerShell launch contract.

No real PowerShell is installed on the development machines: the launch contract is tested with a
stand-in ``pwsh`` that records its argv. Where a real ``pwsh`` exists, the last test runs it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from broker import _shell
from broker._process import ProcessManager
from broker._shell import POWERSHELL_PRELUDE, bash_argv, powershell_argv
from operations import ExecResult, InvalidArgument, Unavailable

pytestmark = pytest.mark.anyio  # see test_process_escape.py

RECORDER = """#!/bin/sh
for a in "$@"; do printf '%s\\0' "$a"; done > "$ARGV_RECORD"
echo "stand-in $(basename "$0")"
"""


def install(directory: Path, name: str, text: str = RECORDER) -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_bash_prefers_bin_bash(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = install(tmp_path, "bash")
    monkeypatch.setattr(_shell, "DEFAULT_BASH", str(fake))
    assert bash_argv("echo hi", search_path="/nonexistent") == [str(fake), "-c", "echo hi"]


def test_bash_from_path_then_sh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(_shell, "DEFAULT_BASH", str(tmp_path / "absent"))
    on_path = install(tmp_path / "bin", "bash")
    assert bash_argv("x", search_path=str(on_path.parent)) == [str(on_path), "-c", "x"]
    assert bash_argv("x", search_path=str(tmp_path / "empty")) == ["sh", "-c", "x"]


def test_custom_shell_path(tmp_path: Path) -> None:
    shell = install(tmp_path, "myshell")
    assert bash_argv("x", str(shell)) == [str(shell), "-c", "x"]
    with pytest.raises(InvalidArgument) as info:
        bash_argv("x", str(tmp_path / "nope"))
    assert info.value.reason == f"Custom shell path not found: {tmp_path / 'nope'}"


@pytest.mark.parametrize("installed", [("pwsh", "powershell"), ("powershell",)])
async def test_powershell_launch_contract(
    installed: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir = tmp_path / "bin"
    for name in installed:
        install(bindir, name)
    monkeypatch.setenv("PATH", str(bindir))
    record = tmp_path / "argv"
    argv = powershell_argv("Get-ChildItem | Select-Object -First 1")
    chosen = bindir / installed[0]  # pwsh wins over powershell
    assert argv[0] == str(chosen)

    pm = ProcessManager(kill_grace=0.2)
    output: list[bytes] = []
    try:
        result = await pm.exec(
            argv,
            cwd="/",
            on_data=output.append,
            env={"ARGV_RECORD": str(record), "PATH": "/usr/bin:/bin"},
        )
    finally:
        await pm.aclose()
    assert result == ExecResult(0)
    assert b"".join(output) == f"stand-in {installed[0]}\n".encode()
    recorded = record.read_bytes().split(b"\0")[:-1]
    assert [a.decode() for a in recorded] == [
        "-NoProfile",
        "-NonInteractive",
        "-ExecutionPolicy",
        "Bypass",
        "-Command",
        "try { [Console]::OutputEncoding=[System.Text.Encoding]::UTF8 } catch {}\n"
        "Get-ChildItem | Select-Object -First 1",
    ]


def test_no_powershell(tmp_path: Path) -> None:
    with pytest.raises(Unavailable) as info:
        powershell_argv("x", search_path=str(tmp_path))
    assert info.value.reason == (
        "No PowerShell executable found. Install PowerShell or add powershell.exe/pwsh.exe to PATH."
    )


async def test_real_powershell_if_installed() -> None:
    """Runs a real PowerShell where one exists; elsewhere checks the broker says it is missing."""
    if shutil.which("pwsh") is None and shutil.which("powershell") is None:
        with pytest.raises(Unavailable):
            powershell_argv("Write-Output x")
        return
    pm = ProcessManager(kill_grace=0.2)
    output: list[bytes] = []
    try:
        result = await pm.exec(
            powershell_argv("Write-Output ([char]0x00e9); exit 3"),
            cwd="/",
            on_data=output.append,
            env=dict(os.environ),
            timeout=60,
        )
    finally:
        await pm.aclose()
    assert result == ExecResult(3)
    assert b"".join(output).strip() == "\u00e9".encode()
    assert POWERSHELL_PRELUDE.startswith("try {")
