"""``ShellExec``: a backend's second shell (``backend.powershell``) as its own Operations object."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from ._abort import AbortSignal
from ._types import ExecResult, OnData

__all__ = ["ShellExec"]

RunInShell = Callable[
    [str, str, OnData, AbortSignal | None, float | None, Mapping[str, str] | None],
    Awaitable[ExecResult],
]
"""``run(command, cwd, on_data, signal, timeout, env)``: the backend's exec, for one shell."""


class ShellExec:
    """Implements :class:`~operations.PowerShellOperations` by handing every call to ``run``.

    Each backend runs both shells through one private method that takes the shell; this object
    binds that method to PowerShell, so ``backend.powershell.exec(...)`` has exactly the
    contract of ``backend.exec(...)``.
    """

    __slots__ = ("_run",)

    def __init__(self, run: RunInShell) -> None:
        self._run = run

    async def exec(
        self,
        command: str,
        cwd: str,
        *,
        on_data: OnData,
        signal: AbortSignal | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        return await self._run(command, cwd, on_data, signal, timeout, env)
