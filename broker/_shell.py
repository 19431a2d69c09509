"""Which shell runs a command, and with which argv (the reference's shell resolution).

``bash_argv`` follows the reference on Unix: a custom shell path if given (it must exist), else
``/bin/bash``, else the first ``bash`` on ``PATH``, else ``sh``; the command is the argument after
``-c``. ``powershell_argv`` takes ``pwsh``, then ``powershell``, on any OS where one exists (the
reference allows it on Windows only; the broker runs it wherever it is installed), with the
reference's flags and its UTF-8 output prelude.
"""

from __future__ import annotations

import os
import shutil

from operations import InvalidArgument, Unavailable

__all__ = [
    "POWERSHELL_ARGS",
    "POWERSHELL_PRELUDE",
    "bash_argv",
    "powershell_argv",
]

DEFAULT_BASH = "/bin/bash"

POWERSHELL_ARGS = ("-NoProfile", "-NonInteractive", "-ExecutionPolicy", "Bypass", "-Command")
"""Flags before the command: no profile scripts, never prompt, no script-signing policy."""

POWERSHELL_PRELUDE = "try { [Console]::OutputEncoding=[System.Text.Encoding]::UTF8 } catch {}"
"""First line of every PowerShell command, so output bytes are UTF-8 on every host."""

POWERSHELL_NAMES = ("pwsh", "powershell")
"""Executables tried in order: PowerShell 7+ first, then Windows PowerShell."""


def bash_argv(
    command: str, shell_path: str | None = None, *, search_path: str | None = None
) -> list[str]:
    """The argv that runs ``command`` through bash (or ``sh`` when there is no bash).

    Args:
        command: the shell command, passed as the single argument after ``-c``.
        shell_path: a shell to use instead of the resolved bash.
        search_path: the ``PATH`` to search for ``bash``; the broker's own ``PATH`` by default.

    Raises:
        InvalidArgument: when ``shell_path`` is given and does not exist.
    """
    if shell_path is not None:
        if not os.path.exists(shell_path):
            raise InvalidArgument("exec", None, f"Custom shell path not found: {shell_path}")
        return [shell_path, "-c", command]
    if os.path.exists(DEFAULT_BASH):
        return [DEFAULT_BASH, "-c", command]
    found = shutil.which("bash", path=search_path)
    if found is not None:
        return [found, "-c", command]
    return ["sh", "-c", command]


def powershell_argv(command: str, *, search_path: str | None = None) -> list[str]:
    """The argv that runs ``command`` through PowerShell, prelude first.

    The result is ``<pwsh|powershell> -NoProfile -NonInteractive -ExecutionPolicy Bypass -Command
    "<prelude>\\n<command>"``, with the executable as found on ``search_path`` (the broker's own
    ``PATH`` by default).

    Raises:
        Unavailable: when neither ``pwsh`` nor ``powershell`` is installed.
    """
    for name in POWERSHELL_NAMES:
        found = shutil.which(name, path=search_path)
        if found is not None:
            return [found, *POWERSHELL_ARGS, f"{POWERSHELL_PRELUDE}\n{command}"]
    raise Unavailable(
        "exec",
        None,
        "No PowerShell executable found. Install PowerShell or add powershell.exe/pwsh.exe to PATH.",
    )
