"""``GuardedBackend``: policy and audit around any backend, so every front-end applies both.

A front-end (gRPC, SSH, in-process) wraps the broker core once per connection::

    ops = GuardedBackend(core, policy, audit=log, principal="ci-bot", transport="grpc",
                         peer="127.0.0.1:51234", close_inner=False)

and the memory backend is wrapped the same way in a CI harness, so both refuse the same requests
with the same :class:`~operations.PolicyDenied`. Every call is checked against the
:class:`~operations.Policy` (by the inner backend, through the gate), then recorded: one audit
event per call, refusals included.

Paths are decided where they are opened: each call hands the backend a :class:`~operations.Gate`,
which the backend asks about the root-relative path it actually resolved (symlinks followed, read
back from the fd it holds) before it uses it, so a symlink named ``notes`` that points at ``.env``
is refused like ``.env``, however often the link is swapped. A command, of course, can read what
the sandbox lets it: deny globs bind file operations; the kernel sandbox (``sandbox.mode``) is
what binds commands. See ``docs/security-model.md``.

**Audit failure:** with ``audit.fail_closed`` (the default), a call is refused with
:class:`~operations.Unavailable` while the audit sink reports itself unhealthy, and a call whose
audit line cannot be written ends with ``Unavailable`` instead of its result.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from collections.abc import AsyncIterable, AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Protocol, Self

from ._abort import AbortController, AbortSignal
from ._as_written import AsWritten, relative
from ._errors import EscapesRoot, OpsError, PolicyDenied, TooLarge, Unavailable
from ._gate import Gate, GatedBackend
from ._guarded_processes import GuardedProcesses
from ._policy import CommandEnvCache, Policy, PolicyEnforcer
from ._processes import ProcessOperations
from ._protocols import Backend, PowerShellOperations
from ._shell_exec import ShellExec
from ._types import DirEntry, ExecResult, FileStat, KillReason, OnData, SearchMatch

__all__ = ["AuditSink", "GuardedBackend"]

STREAM_CHUNK = 1024 * 1024
"""Default piece size of :meth:`GuardedBackend.read_chunks` (the caller usually picks one)."""

REFUSALS: tuple[type[OpsError], ...] = (PolicyDenied, EscapesRoot)
"""Errors recorded with decision ``deny`` (a security decision), not ``error``."""


class AuditSink(Protocol):
    """Where :class:`GuardedBackend` sends one event per call (``broker.AuditLog`` is one)."""

    @property
    def healthy(self) -> bool:
        """False while the last write failed."""
        ...

    def record(self, event: Mapping[str, object]) -> None:
        """Append ``event``; raise any exception if it cannot be written."""
        ...


class _Entry:
    """The audit event of one call, filled in while the call runs, and its decision."""

    __slots__ = ("fields", "gate", "skip")

    def __init__(self, fields: dict[str, object], gate: Gate) -> None:
        self.fields = fields
        self.gate = gate
        self.skip = False  # set by a call that turned out to do nothing (see read_small)

    def set(self, **fields: object) -> None:
        self.fields.update(fields)


class GuardedBackend:
    """Every :class:`~operations.Backend` member, checked against ``policy`` and audited.

    Args:
        inner: the backend that does the work. A :class:`~operations.GatedBackend` (the broker
            core, the memory backend) decides on the paths it resolves; any other backend (a
            remote client, whose broker decides on its own side) is asked about paths as
            written (:class:`~operations._as_written.AsWritten`).
        policy: the rules.
        audit: the sink for one event per call, or ``None`` for no audit.
        principal / transport / peer: who is calling, over what, from where (recorded as given).
        parent_env: the environment allowlisted names are copied from (default: this process's).
        close_inner: whether :meth:`aclose` closes ``inner`` (false when it is shared).
    """

    def __init__(
        self,
        inner: Backend,
        policy: Policy,
        *,
        audit: AuditSink | None = None,
        principal: str = "local",
        transport: str = "local",
        peer: str | None = None,
        parent_env: Mapping[str, str] | None = None,
        close_inner: bool = True,
    ) -> None:
        self.inner = inner
        self._ops: GatedBackend = inner if isinstance(inner, GatedBackend) else AsWritten(inner)
        self.policy = policy
        self.enforcer = PolicyEnforcer(policy)
        self._audit = audit
        self._who: dict[str, object] = {
            "principal": principal,
            "transport": transport,
            "peer": peer,
        }
        self._env = CommandEnvCache(parent_env)
        self._close_inner = close_inner
        self._powershell = ShellExec(functools.partial(self._exec, "powershell"))
        self._processes: GuardedProcesses | None = None

    # -- plumbing ------------------------------------------------------------------------------

    @property
    def root(self) -> str:
        return self.inner.root

    @property
    def powershell(self) -> PowerShellOperations:
        return self._powershell

    @property
    def processes(self) -> ProcessOperations:
        """The backend's processes that outlive a call, checked and audited
        (:class:`~operations._guarded_processes.GuardedProcesses`), owned by this principal."""
        if self._processes is None:
            owner = str(self._who["principal"])
            self._processes = GuardedProcesses(self, self._ops.processes, owner)
        return self._processes

    def command_as_audited(self, command: str) -> str:
        """A command as the audit records it: its text, or its SHA-256 when
        ``audit.log_commands`` is off."""
        return command if self.policy.audit.log_commands else _digest(command)

    def relative(self, path: str) -> str | None:
        """``path`` relative to the root, normalised; ``None`` if it lies outside the root."""
        return relative(self.inner.root, path)

    def _audited(self, op: str, path: str | None, **fields: object) -> _Audited:
        """``async with self._audited(op, path) as entry``: the call's audit line, written
        when the block ends (a plain class, not a generator: it runs around every call).
        ``entry.gate`` is the call's decision, asked by the backend on what it resolved."""
        entry = _Entry(
            {"op": op, **self._who, "path": path, "resolved": None, "decision": "allow", **fields},
            Gate(self.enforcer, op, path or ""),
        )
        return _Audited(self, entry)

    @staticmethod
    def _write(audit: AuditSink, entry: _Entry) -> bool:
        """Record ``entry``; whether it was written (the caller decides what a failure means)."""
        try:
            audit.record(entry.fields)
        except Exception:
            return False
        return True

    # -- reading -------------------------------------------------------------------------------

    async def read_file(self, path: str) -> bytes:
        async with self._audited("read_file", path) as entry:
            data = await self._ops.read_file(path, gate=entry.gate)
            limit = self.policy.max_read_bytes
            if len(data) > limit:
                raise TooLarge(
                    "read_file",
                    path,
                    f"file is {len(data)} bytes, above the policy's max_read_bytes ({limit})",
                )
            entry.set(bytes_out=len(data))
            return data

    async def read_chunks(
        self, path: str, *, chunk_size: int = STREAM_CHUNK
    ) -> AsyncIterator[bytes]:
        """``read_file`` in pieces (:class:`~operations.ChunkedFileOperations`): the same checks
        and one audit line (op ``read_file``, total ``bytes_out``); ``max_read_bytes`` is enforced
        as the pieces pass, so a file growing past it still ends in ``TooLarge``."""
        async with self._audited("read_file", path) as entry:
            limit = self.policy.max_read_bytes
            sent = 0
            pieces = self._ops.read_chunks(path, chunk_size=chunk_size, gate=entry.gate)
            try:
                async for piece in pieces:
                    sent += len(piece)
                    if sent > limit:
                        raise TooLarge(
                            "read_file",
                            path,
                            f"file is larger than the policy's max_read_bytes ({limit})",
                        )
                    entry.set(bytes_out=sent)
                    yield piece
            finally:
                aclose = getattr(pieces, "aclose", None)
                if aclose is not None:
                    await aclose()

    async def read_small(self, path: str, limit: int) -> bytes | None:
        """``read_file`` of a file of at most ``limit`` bytes, else ``None`` (see
        :func:`~operations.read_small`). The same checks; a file too large is neither returned
        nor audited here: the caller streams it with :meth:`read_chunks`, which audits it."""
        async with self._audited("read_file", path) as entry:
            data = await self._ops.read_small(path, limit, gate=entry.gate)
            if data is None:
                entry.skip = True
                return None
            if len(data) > self.policy.max_read_bytes:
                raise TooLarge(
                    "read_file",
                    path,
                    f"file is {len(data)} bytes, above the policy's max_read_bytes "
                    f"({self.policy.max_read_bytes})",
                )
            entry.set(bytes_out=len(data))
            return data

    async def access(self, path: str, *, writable: bool = False) -> None:
        async with self._audited("access", path, writable=writable) as entry:
            await self._ops.access(path, writable=writable, gate=entry.gate)

    async def detect_image_mime_type(self, path: str) -> str | None:
        async with self._audited("detect_image_mime_type", path) as entry:
            return await self._ops.detect_image_mime_type(path, gate=entry.gate)

    async def exists(self, path: str) -> bool:
        async with self._audited("exists", path) as entry:
            return await self._ops.exists(path, gate=entry.gate)

    async def is_directory(self, path: str) -> bool:
        async with self._audited("is_directory", path) as entry:
            return await self._ops.is_directory(path, gate=entry.gate)

    async def stat(self, path: str) -> FileStat:
        async with self._audited("stat", path) as entry:
            return await self._ops.stat(path, gate=entry.gate)

    async def lstat(self, path: str) -> FileStat:
        async with self._audited("lstat", path) as entry:
            return await self._ops.lstat(path, gate=entry.gate)

    async def readdir(self, path: str) -> list[str]:
        async with self._audited("readdir", path) as entry:
            names = await self._ops.readdir(path, gate=entry.gate)
            entry.set(count=len(names))
            return names

    async def list_dir(self, path: str) -> list[DirEntry]:
        async with self._audited("list_dir", path) as entry:
            entries = await self._ops.list_dir(path, gate=entry.gate)
            entry.set(count=len(entries))
            return entries

    async def glob(
        self, pattern: str, cwd: str, *, ignore: Sequence[str] = (), limit: int = 1000
    ) -> list[str]:
        async with self._audited("glob", cwd, pattern=pattern) as entry:
            found = await self._ops.glob(pattern, cwd, ignore=ignore, limit=limit, gate=entry.gate)
            entry.set(count=len(found))
            return found

    async def search(
        self,
        pattern: str,
        path: str,
        *,
        glob: str | None = None,
        ignore_case: bool = False,
        literal: bool = False,
        limit: int = 100,
    ) -> AsyncIterator[SearchMatch]:
        async with self._audited("search", path, pattern=pattern) as entry:
            sent = count = 0
            matches = self._ops.search(
                pattern,
                path,
                glob=glob,
                ignore_case=ignore_case,
                literal=literal,
                limit=limit,
                gate=entry.gate,
            )
            try:
                async for match in matches:
                    count += 1
                    sent += len(match.line_text or "")
                    entry.set(bytes_out=sent, count=count)
                    yield match
            finally:
                aclose = getattr(matches, "aclose", None)
                if aclose is not None:
                    await aclose()

    # -- writing -------------------------------------------------------------------------------

    async def write_file(self, path: str, content: bytes | str, *, mode: int | None = None) -> None:
        async with self._audited("write_file", path) as entry:
            size = len(content.encode() if isinstance(content, str) else content)
            entry.set(bytes_in=size)
            limit = self.policy.max_write_bytes
            if size > limit:
                raise TooLarge(
                    "write_file",
                    path,
                    f"content is {size} bytes, above the policy's max_write_bytes ({limit})",
                )
            await self._ops.write_file(path, content, mode=mode, gate=entry.gate)

    async def write_chunks(
        self, path: str, chunks: AsyncIterable[bytes], *, mode: int | None = None
    ) -> None:
        """``write_file`` with content in pieces (:class:`~operations.ChunkedFileOperations`):
        the same checks and one audit line (op ``write_file``, total ``bytes_in``); past
        ``max_write_bytes`` the stream is refused with ``TooLarge`` and nothing is written."""
        async with self._audited("write_file", path) as entry:
            limit = self.policy.max_write_bytes
            received = 0

            async def counted() -> AsyncIterator[bytes]:
                nonlocal received
                async for piece in chunks:
                    received += len(piece)
                    entry.set(bytes_in=received)
                    if received > limit:
                        raise TooLarge(
                            "write_file",
                            path,
                            f"content is more than the policy's max_write_bytes ({limit})",
                        )
                    yield piece

            entry.set(bytes_in=0)
            await self._ops.write_chunks(path, counted(), mode=mode, gate=entry.gate)

    async def mkdir(self, path: str) -> None:
        """``mkdir -p``: an existing directory changes nothing, so it is no write decision (a
        ``write`` under ``read_only`` is then refused on its own file, not on its parent)."""
        async with self._audited("mkdir", path) as entry:
            try:
                if await self._ops.is_directory(path, gate=entry.gate):
                    return
            except REFUSALS:
                raise
            except OpsError:
                pass  # missing, or not a directory: mkdir says which, in its own words
            await self._ops.mkdir(path, gate=entry.gate)

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        async with self._audited("remove", path, recursive=recursive) as entry:
            await self._ops.remove(path, recursive=recursive, gate=entry.gate)

    async def rename(self, source: str, destination: str) -> None:
        async with self._audited("rename", source, destination=destination) as entry:
            await self._ops.rename(source, destination, gate=entry.gate)

    # -- commands ------------------------------------------------------------------------------

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
        return await self._exec("bash", command, cwd, on_data, signal, timeout, env)

    async def _exec(
        self,
        shell: str,
        command: str,
        cwd: str,
        on_data: OnData,
        signal: AbortSignal | None,
        timeout: float | None,
        env: Mapping[str, str] | None,
    ) -> ExecResult:
        op = "exec" if shell == "bash" else "exec_powershell"
        shown = self.command_as_audited(command)
        async with self._audited(op, cwd, command=shown, timeout=timeout) as entry:
            enforced = self.enforcer.check_exec(op, cwd, shell, timeout)
            entry.set(timeout=enforced)
            full_env = self._env.build(self.policy, env)
            result = await self._run_limited(
                shell, command, cwd, on_data, signal, enforced, full_env, entry
            )
            entry.set(exit_code=result.exit_code, kill_reason=_kill_name(result.kill_reason))
            return result

    async def _run_limited(
        self,
        shell: str,
        command: str,
        cwd: str,
        on_data: OnData,
        signal: AbortSignal | None,
        timeout: float,
        env: Mapping[str, str],
        entry: _Entry,
    ) -> ExecResult:
        """Run through ``inner``, killing the tree once output passes ``exec.max_output_bytes``.

        This is the one output limit of a served command: the signal is aborted with
        ``KillReason.OUTPUT_LIMIT``, which the backend reports as the result's kill reason.
        """
        limit = self.policy.exec.max_output_bytes
        controller = AbortController()
        remove = signal.add_listener(lambda: controller.abort(signal.reason)) if signal else None
        sent = 0
        over = False

        async def forward(data: bytes) -> None:
            nonlocal sent, over
            if over:
                return
            if sent + len(data) > limit:
                data = data[: limit - sent]
                over = True
                controller.abort(KillReason.OUTPUT_LIMIT)
            sent += len(data)
            entry.set(bytes_out=sent)
            if data:
                pending = on_data(data)
                if pending is not None:
                    await pending

        runner = self._ops.exec if shell == "bash" else self._ops.exec_powershell
        try:
            return await runner(
                command,
                cwd,
                on_data=forward,
                signal=controller.signal,
                timeout=timeout,
                env=env,
                gate=entry.gate,
            )
        finally:
            if remove is not None:
                remove()

    # -- lifetime ------------------------------------------------------------------------------

    async def aclose(self) -> None:
        if self._close_inner:
            await self.inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class _Audited:
    """The audit of one call (see :meth:`GuardedBackend._audited`).

    **Audit failure:** with ``audit.fail_closed``, entering refuses the call while the sink is
    unhealthy (recording the refusal), and a call whose line cannot be written ends with
    ``Unavailable`` instead of its result.
    """

    __slots__ = ("_entry", "_guard", "_started")

    def __init__(self, guard: GuardedBackend, entry: _Entry) -> None:
        self._guard = guard
        self._entry = entry
        self._started = 0.0

    async def __aenter__(self) -> _Entry:
        guard, entry = self._guard, self._entry
        audit = guard._audit
        if audit is not None and guard.policy.audit.fail_closed and not audit.healthy:
            # Refuse, and try to record the refusal: if that works the log is back, and the
            # next call runs.
            entry.set(decision="deny", reason="audit log unavailable", code=Unavailable.code)
            guard._write(audit, entry)
            raise Unavailable(
                str(entry.fields["op"]),
                _path_of(entry),
                "the audit log could not be written, and the policy refuses unaudited "
                "operations (audit.fail_closed); free space or fix the audit file, then retry",
            )
        self._started = time.monotonic()
        return entry

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        guard, entry = self._guard, self._entry
        gate = entry.gate
        entry.fields["resolved"] = gate.resolved
        if gate.destination is not None:
            entry.fields["destination_resolved"] = gate.destination
        if exc is not None:
            entry.set(**_outcome(exc))
        entry.set(duration_ms=round((time.monotonic() - self._started) * 1000, 3))
        audit = guard._audit
        if audit is None or entry.skip or guard._write(audit, entry):
            return
        if exc is None and guard.policy.audit.fail_closed:
            raise Unavailable(
                str(entry.fields["op"]),
                _path_of(entry),
                "the operation ran but its audit line could not be written",
            )


def _path_of(entry: _Entry) -> str | None:
    path = entry.fields["path"]
    return path if isinstance(path, str) else None


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _kill_name(reason: KillReason | None) -> str | None:
    return None if reason is None else reason.value


def _outcome(exc: BaseException) -> dict[str, object]:
    if isinstance(exc, GeneratorExit):
        return {"closed_early": True}  # the caller stopped reading search results
    if isinstance(exc, REFUSALS):
        rule = exc.rule if isinstance(exc, PolicyDenied) else None
        return {"decision": "deny", "reason": rule or exc.reason, "code": exc.code}
    if isinstance(exc, OpsError):
        return {"decision": "error", "reason": exc.reason, "code": exc.code}
    if isinstance(exc, asyncio.CancelledError):
        return {"decision": "error", "reason": "cancelled by the caller", "code": "cancelled"}
    return {"decision": "error", "reason": type(exc).__name__, "code": "internal"}
