"""``GuardedBackend``: policy and audit around any backend, so every front-end applies both.

A front-end (gRPC, SSH, in-process) wraps the broker core once per connection::

    ops = GuardedBackend(core, policy, audit=log, principal="ci-bot", transport="grpc",
                         peer="127.0.0.1:51234", close_inner=False)

and the memory backend is wrapped the same way in a CI harness, so both refuse the same requests
with the same :class:`~operations.PolicyDenied`. Every call is checked against the
:class:`~operations.Policy` (before the inner backend sees it), then forwarded, then recorded: one
audit event per call, refusals included.

Paths are matched as the caller wrote them, made relative to ``inner.root`` and normalised. When a
``resolve`` function is given (the broker passes one that follows symlinks on disk), the resolved
path is checked too, so a symlink named ``notes`` that points at ``.env`` is still refused. A
command, of course, can read what the sandbox lets it: deny globs bind file operations; the kernel
sandbox (``sandbox.mode``) is what binds commands. See ``docs/security-model.md``.

**Audit failure:** with ``audit.fail_closed`` (the default), a call is refused with
:class:`~operations.Unavailable` while the audit sink reports itself unhealthy, and a call whose
audit line cannot be written ends with ``Unavailable`` instead of its result.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import posixpath
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping, Sequence
from types import TracebackType
from typing import Protocol, Self

from ._abort import AbortController, AbortSignal
from ._chunked import read_chunks, read_small, write_chunks
from ._errors import EscapesRoot, OpsError, PolicyDenied, TooLarge, Unavailable
from ._policy import CommandEnvCache, Policy, PolicyEnforcer
from ._protocols import Backend, PowerShellOperations
from ._shell_exec import ShellExec
from ._types import DirEntry, ExecResult, FileKind, FileStat, KillReason, OnData, SearchMatch

__all__ = ["AuditSink", "GuardedBackend"]

MAX_TREE_CHECK = 10_000
"""Entries a recursive remove or a directory rename may hold to be checked against
``deny_write``; a larger tree is refused rather than moved unchecked."""

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
    """The audit event of one call, filled in while the call runs."""

    __slots__ = ("fields", "skip")

    def __init__(self, fields: dict[str, object]) -> None:
        self.fields = fields
        self.skip = False  # set by a call that turned out to do nothing (see read_small)

    def set(self, **fields: object) -> None:
        self.fields.update(fields)


class GuardedBackend:
    """Every :class:`~operations.Backend` member, checked against ``policy`` and audited.

    Args:
        inner: the backend that does the work.
        policy: the rules; checked before ``inner`` is called.
        audit: the sink for one event per call, or ``None`` for no audit.
        principal / transport / peer: who is calling, over what, from where (recorded as given).
        resolve: maps an absolute path to the absolute path it resolves to (following symlinks),
            for checking the target too; ``None`` checks the path as written only.
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
        resolve: Callable[[str], str] | None = None,
        parent_env: Mapping[str, str] | None = None,
        close_inner: bool = True,
    ) -> None:
        self.inner = inner
        self.policy = policy
        self.enforcer = PolicyEnforcer(policy)
        self._audit = audit
        self._who: dict[str, object] = {
            "principal": principal,
            "transport": transport,
            "peer": peer,
        }
        self._resolve = resolve
        self._real_root: str | None = None
        self._env = CommandEnvCache(parent_env)
        self._close_inner = close_inner
        self._powershell = ShellExec(functools.partial(self._exec, "powershell"))

    # -- plumbing ------------------------------------------------------------------------------

    @property
    def root(self) -> str:
        return self.inner.root

    @property
    def powershell(self) -> PowerShellOperations:
        return self._powershell

    def relative(self, path: str) -> str | None:
        """``path`` relative to the root, normalised; ``None`` if it lies outside the root."""
        root = posixpath.normpath(self.inner.root)
        full = posixpath.normpath(posixpath.join(root, path))
        if full == root:
            return ""
        prefix = root if root.endswith("/") else root + "/"
        return full[len(prefix) :] if full.startswith(prefix) else None

    def _targets(self, path: str) -> tuple[str | None, str | None]:
        """(path as written, resolved path), both root-relative or ``None`` when outside."""
        written = self.relative(path)
        if self._resolve is None:
            return written, written
        root = posixpath.normpath(self.inner.root)
        if self._real_root is None:
            self._real_root = self._resolve(root)
        real_root = self._real_root
        full = self._resolve(posixpath.join(root, path))
        if full == real_root:
            return written, ""
        prefix = real_root.rstrip("/") + "/"
        return written, (full[len(prefix) :] if full.startswith(prefix) else None)

    def _check(self, op: str, path: str, entry: _Entry, *, write: bool = False) -> None:
        written, resolved = self._targets(path)
        entry.set(resolved=resolved)
        for rel in dict.fromkeys((written, resolved)):
            if rel is None:
                continue  # outside the root: the inner backend refuses it (EscapesRoot)
            if write:
                self.enforcer.check_write(op, rel, shown=path)
            else:
                self.enforcer.check_read(op, rel, shown=path)

    def _audited(self, op: str, path: str | None, **fields: object) -> _Audited:
        """``async with self._audited(op, path) as entry``: the call's audit line, written
        when the block ends (a plain class, not a generator: it runs around every call)."""
        entry = _Entry(
            {"op": op, **self._who, "path": path, "resolved": None, "decision": "allow", **fields}
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
            self._check("read_file", path, entry)
            data = await self.inner.read_file(path)
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
            self._check("read_file", path, entry)
            limit = self.policy.max_read_bytes
            sent = 0
            pieces = read_chunks(self.inner, path, chunk_size)
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
                await pieces.aclose()

    async def read_small(self, path: str, limit: int) -> bytes | None:
        """``read_file`` of a file of at most ``limit`` bytes, else ``None`` (see
        :func:`~operations.read_small`). The same checks; a file too large is neither returned
        nor audited here: the caller streams it with :meth:`read_chunks`, which audits it."""
        async with self._audited("read_file", path) as entry:
            self._check("read_file", path, entry)
            data = await read_small(self.inner, path, limit)
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
            self._check("access", path, entry)
            if writable:
                self._check("access", path, entry, write=True)
            await self.inner.access(path, writable=writable)

    async def detect_image_mime_type(self, path: str) -> str | None:
        async with self._audited("detect_image_mime_type", path) as entry:
            self._check("detect_image_mime_type", path, entry)
            return await self.inner.detect_image_mime_type(path)

    async def exists(self, path: str) -> bool:
        async with self._audited("exists", path) as entry:
            entry.set(resolved=self._targets(path)[1])
            return await self.inner.exists(path)

    async def is_directory(self, path: str) -> bool:
        async with self._audited("is_directory", path) as entry:
            entry.set(resolved=self._targets(path)[1])
            return await self.inner.is_directory(path)

    async def stat(self, path: str) -> FileStat:
        async with self._audited("stat", path) as entry:
            entry.set(resolved=self._targets(path)[1])
            return await self.inner.stat(path)

    async def lstat(self, path: str) -> FileStat:
        async with self._audited("lstat", path) as entry:
            entry.set(resolved=self._targets(path)[1])
            return await self.inner.lstat(path)

    async def readdir(self, path: str) -> list[str]:
        async with self._audited("readdir", path) as entry:
            self._check("readdir", path, entry)
            names = await self.inner.readdir(path)
            entry.set(count=len(names))
            return names

    async def list_dir(self, path: str) -> list[DirEntry]:
        async with self._audited("list_dir", path) as entry:
            self._check("list_dir", path, entry)
            entries = await self.inner.list_dir(path)
            entry.set(count=len(entries))
            return entries

    async def glob(
        self, pattern: str, cwd: str, *, ignore: Sequence[str] = (), limit: int = 1000
    ) -> list[str]:
        async with self._audited("glob", cwd, pattern=pattern) as entry:
            self._check("glob", cwd, entry)
            base = self.relative(cwd)
            found = await self.inner.glob(pattern, cwd, ignore=ignore, limit=limit)
            if base is not None:
                found = [
                    name
                    for name in found
                    if not self.enforcer.read_denied(posixpath.join(base, name).lstrip("/"))
                ]
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
            self._check("search", path, entry)
            sent = count = 0
            matches = self.inner.search(
                pattern, path, glob=glob, ignore_case=ignore_case, literal=literal, limit=limit
            )
            try:
                async for match in matches:
                    rel = self.relative(match.path)
                    if rel is not None and self.enforcer.read_denied(rel):
                        continue  # never leak a denied file's lines through search
                    count += 1
                    sent += len(match.line_text or "")
                    entry.set(bytes_out=sent, count=count)
                    yield match
            finally:
                aclose = getattr(matches, "aclose", None)
                if aclose is not None:
                    await aclose()

    # -- writing -------------------------------------------------------------------------------

    async def write_file(self, path: str, content: bytes | str) -> None:
        async with self._audited("write_file", path) as entry:
            self._check("write_file", path, entry, write=True)
            size = len(content.encode() if isinstance(content, str) else content)
            entry.set(bytes_in=size)
            limit = self.policy.max_write_bytes
            if size > limit:
                raise TooLarge(
                    "write_file",
                    path,
                    f"content is {size} bytes, above the policy's max_write_bytes ({limit})",
                )
            await self.inner.write_file(path, content)

    async def write_chunks(self, path: str, chunks: AsyncIterable[bytes]) -> None:
        """``write_file`` with content in pieces (:class:`~operations.ChunkedFileOperations`):
        the same checks and one audit line (op ``write_file``, total ``bytes_in``); past
        ``max_write_bytes`` the stream is refused with ``TooLarge`` and nothing is written."""
        async with self._audited("write_file", path) as entry:
            self._check("write_file", path, entry, write=True)
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
            await write_chunks(self.inner, path, counted())

    async def mkdir(self, path: str) -> None:
        async with self._audited("mkdir", path) as entry:
            self._check("mkdir", path, entry, write=True)
            await self.inner.mkdir(path)

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        async with self._audited("remove", path, recursive=recursive) as entry:
            self._check("remove", path, entry, write=True)
            if recursive:
                await self._check_tree("remove", path, None)
            await self.inner.remove(path, recursive=recursive)

    async def rename(self, source: str, destination: str) -> None:
        async with self._audited("rename", source, destination=destination) as entry:
            self._check("rename", destination, entry, write=True)
            entry.set(destination_resolved=entry.fields["resolved"])
            self._check("rename", source, entry, write=True)
            self._check_no_exposure("rename", source, destination)
            try:
                is_dir = (await self.inner.lstat(source)).kind is FileKind.DIRECTORY
            except OpsError:
                is_dir = False  # the rename itself reports what is wrong with the source
            if is_dir:
                await self._check_tree("rename", source, destination)
            await self.inner.rename(source, destination)

    def _check_no_exposure(self, op: str, source: str, destination: str) -> None:
        """Refuse moving a read-denied file to a readable name (that would undo ``deny_read``)."""
        src, dst = self.relative(source), self.relative(destination)
        if src is None or dst is None:
            return
        try:
            self.enforcer.check_read(op, src, shown=source)
        except PolicyDenied as denied:
            if not self.enforcer.read_denied(dst):
                raise PolicyDenied(op, source, rule=denied.rule) from None

    async def _check_tree(self, op: str, path: str, destination: str | None) -> None:
        """Check every entry below directory ``path`` (and its new name under ``destination``)."""
        pending = [path]
        seen = 0
        while pending:
            directory = pending.pop()
            try:
                entries = await self.inner.list_dir(directory)
            except OpsError:
                continue  # not a directory, or gone: the operation itself reports it
            for item in entries:
                seen += 1
                if seen > MAX_TREE_CHECK:
                    raise PolicyDenied(
                        op,
                        path,
                        f"more than {MAX_TREE_CHECK} entries to check against deny_write; "
                        "remove or move smaller parts",
                        rule="deny_write: tree too large to check",
                    )
                child = posixpath.join(directory, item.name)
                for candidate in (child, _moved(child, path, destination)):
                    rel = self.relative(candidate) if candidate is not None else None
                    if rel is not None:
                        self.enforcer.check_write(op, rel, shown=candidate)
                if destination is not None:
                    moved = _moved(child, path, destination)
                    if moved is not None:
                        self._check_no_exposure(op, child, moved)
                if item.kind is FileKind.DIRECTORY:
                    pending.append(child)

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
        shown = command if self.policy.audit.log_commands else _digest(command)
        async with self._audited(op, cwd, command=shown, timeout=timeout) as entry:
            written, resolved = self._targets(cwd)
            entry.set(resolved=resolved)
            enforced = 0.0
            for rel in dict.fromkeys(r for r in (written, resolved) if r is not None):
                enforced = self.enforcer.check_exec(op, rel, shell, timeout, shown=cwd)
            if written is None and resolved is None:
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

        runner = self.inner if shell == "bash" else self.inner.powershell
        try:
            return await runner.exec(
                command, cwd, on_data=forward, signal=controller.signal, timeout=timeout, env=env
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


def _moved(child: str, source: str, destination: str | None) -> str | None:
    if destination is None:
        return None
    return posixpath.join(destination, posixpath.relpath(child, source))


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
