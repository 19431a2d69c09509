"""``GuardedProcesses``: policy and audit around a backend's processes that outlive a call.

:class:`~operations.GuardedBackend` hands this out as its ``processes``. Starting a process is
checked like ``exec`` (commands enabled, bash allowed, the cwd decided by the backend through the
call's gate on the directory it opens) and gets the policy's environment; every call is audited
(``start_process`` with the command, ``attach_process``, ``write_stdin`` with its bytes,
``signal_process``, ``resize_process``, ``wait_process``, ``kill_process``, ``list_processes``),
and so is the end of every process started here (``process_exit``, with its exit code or kill
reason). Calls name the guard's principal as the owner: a principal sees only its own processes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING

from ._errors import OpsError
from ._processes import GatedProcessOperations, ProcessInfo, ProcessOutput, PtySize
from ._timeout import check_timeout

if TYPE_CHECKING:
    from ._guarded import GuardedBackend

__all__ = ["GuardedProcesses"]


class GuardedProcesses:
    """:class:`~operations.ProcessOperations` of ``guard``: ``inner`` checked and audited."""

    def __init__(self, guard: GuardedBackend, inner: GatedProcessOperations, owner: str) -> None:
        self._guard = guard
        self._inner = inner
        self._owner = owner
        self._watchers: set[asyncio.Task[None]] = set()

    async def start(
        self,
        command: str,
        cwd: str,
        *,
        env: Mapping[str, str] | None = None,
        pty: PtySize | None = None,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        backpressure: bool = False,
    ) -> ProcessInfo:
        guard = self._guard
        op = "start_process"
        shown = guard.command_as_audited(command)
        async with guard._audited(op, cwd, command=shown, timeout=timeout) as entry:
            guard.enforcer.check_exec(op, cwd, "bash", None)  # commands on, bash allowed
            info = await self._inner.start(
                command,
                cwd,
                env=guard._env.build(guard.policy, env),
                pty=pty,
                timeout=check_timeout(timeout, op, cwd),
                idle_timeout=check_timeout(idle_timeout, op, cwd),
                backpressure=backpressure,
                owner=self._owner,
                gate=entry.gate,
            )
            entry.set(process=info.id)
        watcher = asyncio.ensure_future(self._audit_exit(info, shown))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)
        return info

    async def _audit_exit(self, info: ProcessInfo, command: str) -> None:
        """Record the end of a process started here, whenever it comes."""
        with contextlib.suppress(OpsError):
            end = await self._inner.wait(info.id, owner=self._owner)
            async with self._guard._audited("process_exit", info.cwd, command=command) as entry:
                entry.set(
                    process=info.id,
                    exit_code=end.exit_code,
                    signal=end.signal,
                    kill_reason=None if end.kill_reason is None else end.kill_reason.value,
                    bytes_out=end.bytes_out,
                )

    async def attach(self, id: str, *, from_offset: int = 0) -> AsyncIterator[ProcessOutput]:
        async with self._guard._audited(
            "attach_process", None, process=id, from_offset=from_offset
        ) as entry:
            sent = 0
            outputs = self._inner.attach(id, from_offset=from_offset, owner=self._owner)
            try:
                async for output in outputs:
                    sent += len(output.data)
                    entry.set(bytes_out=sent)
                    yield output
            finally:
                aclose = getattr(outputs, "aclose", None)
                if aclose is not None:
                    await aclose()

    async def write_stdin(self, id: str, data: bytes) -> None:
        async with self._guard._audited("write_stdin", None, process=id, bytes_in=len(data)):
            await self._inner.write_stdin(id, data, owner=self._owner)

    async def close_stdin(self, id: str) -> None:
        async with self._guard._audited("close_stdin", None, process=id):
            await self._inner.close_stdin(id, owner=self._owner)

    async def signal(self, id: str, signal: int) -> None:
        async with self._guard._audited("signal_process", None, process=id, signal=signal):
            await self._inner.signal(id, signal, owner=self._owner)

    async def resize(self, id: str, cols: int, rows: int) -> None:
        async with self._guard._audited("resize_process", None, process=id, cols=cols, rows=rows):
            await self._inner.resize(id, cols, rows, owner=self._owner)

    async def list_processes(self) -> list[ProcessInfo]:
        async with self._guard._audited("list_processes", None) as entry:
            found = await self._inner.list_processes(owner=self._owner)
            entry.set(count=len(found))
            return found

    async def wait(self, id: str) -> ProcessInfo:
        async with self._guard._audited("wait_process", None, process=id):
            return await self._inner.wait(id, owner=self._owner)

    async def kill(self, id: str) -> ProcessInfo:
        async with self._guard._audited("kill_process", None, process=id) as entry:
            info = await self._inner.kill(id, owner=self._owner)
            entry.set(kill_reason=None if info.kill_reason is None else info.kill_reason.value)
            return info
