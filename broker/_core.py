"""``Broker``: the enforcement core, one object implementing every ``operations`` protocol.

Every file operation goes through :class:`~broker._resolver.Root`, so nothing reaches outside the
workspace root; ``glob`` and ``search`` walk from directory fds (``_treewalk``) and may hand the
search to a confined ``rg`` (``_rg``); commands go to the process manager with a working directory
opened beneath the root, inside the policy's Landlock sandbox when one is given (``sandbox=``).
Front-ends (gRPC, SSH) and the ``local:`` backend call this object.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
import shutil
import stat as st
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

from operations import (
    IMAGE_SNIFF_BYTES,
    AbortSignal,
    DirEntry,
    EscapesRoot,
    ExecPolicy,
    ExecResult,
    FileKind,
    FileStat,
    Gate,
    InvalidArgument,
    LineMatcher,
    NotADirectory,
    NotFound,
    OnData,
    OpsError,
    ProcessPolicy,
    SearchMatch,
    ShellExec,
    TooLarge,
    Unavailable,
    check_mode,
    glob_paths,
    read_small_streamed,
    search_file,
    sniff_image_mime_type,
)

from . import _rg, _treewalk
from ._dirfd import AtomicFile, errno_error
from ._landlock import Ruleset
from ._process import MINIMAL_ENV, ProcessManager
from ._processes import ProcessTable
from ._resolver import Root
from ._shell import POWERSHELL_NAMES, bash_argv, powershell_argv

__all__ = ["DEFAULT_MAX_READ_BYTES", "Broker"]

DEFAULT_MAX_READ_BYTES = 64 * 1024 * 1024  # a tool call never needs more; guards broker memory
INLINE_READ_BYTES = 256 * 1024  # smaller files are read on the event loop (a thread hop costs more)
READ_CHUNK = 1024 * 1024
WRITE_BATCH = 1024 * 1024  # streamed pieces are gathered to this size: one thread hop per MiB
T = TypeVar("T")


def _kind(mode: int) -> FileKind:
    if st.S_ISREG(mode):
        return FileKind.FILE
    if st.S_ISDIR(mode):
        return FileKind.DIRECTORY
    if st.S_ISLNK(mode):
        return FileKind.SYMLINK
    return FileKind.OTHER


def _file_stat(info: os.stat_result) -> FileStat:
    return FileStat(_kind(info.st_mode), info.st_size, st.S_IMODE(info.st_mode), info.st_mtime)


def _read_fd(fd: int, limit: int, size: int = -1) -> bytes:
    """Read ``fd`` to its end, refusing more than ``limit`` bytes (the file may grow meanwhile).

    ``size`` (from ``fstat``) lets a small file be read in one call: a regular file's read is
    short only at its end.
    """
    if 0 <= size < READ_CHUNK:
        data = os.read(fd, size + 1)
        if len(data) <= size:
            return data
        chunks, total = [data], len(data)
    else:
        chunks, total = [], 0
    while True:
        chunk = os.read(fd, min(READ_CHUNK, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise OverflowError


_NOWAIT = getattr(os, "RWF_NOWAIT", None)  # preadv2 flag: read only what the page cache holds


def _read_cached(fd: int, buffer: bytearray, offset: int) -> bytes | None:
    """Up to ``len(buffer)`` bytes at ``offset`` if the page cache holds them (so the read
    cannot block), else ``None``; ``b""`` at the end of the file."""
    if _NOWAIT is None:
        return None
    try:
        count = os.preadv(fd, [buffer], offset, _NOWAIT)
    except (BlockingIOError, InterruptedError):
        return None  # not cached: the caller reads in a thread
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):
            return None  # a file system without RWF_NOWAIT
        raise
    return bytes(memoryview(buffer)[:count])


def _forget(threads: set[asyncio.Future[Any]]) -> Callable[[asyncio.Future[Any]], None]:
    """A done-callback: drop a finished thread job (and retrieve its error, so none is logged)."""

    def done(future: asyncio.Future[Any]) -> None:
        threads.discard(future)
        if not future.cancelled():
            future.exception()

    return done


class _FdJobs:
    """Blocking calls on one open file, run one at a time in threads.

    A cancelled caller does not stop a call already running, so the file is released through
    :meth:`then`, after the last call ends; the broker's ``aclose`` waits for the calls too.
    """

    __slots__ = ("_last", "_threads")

    def __init__(self, threads: set[asyncio.Future[Any]]) -> None:
        self._threads = threads
        self._last: asyncio.Future[Any] | None = None

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        future = asyncio.get_running_loop().run_in_executor(None, fn, *args)
        self._last = future
        self._threads.add(future)
        future.add_done_callback(_forget(self._threads))
        return await asyncio.shield(future)

    def then(self, cleanup: Callable[[], None]) -> None:
        """Run ``cleanup`` now, or when the call still running in a thread ends."""
        last = self._last
        if last is None or last.done():
            cleanup()
        else:
            last.add_done_callback(lambda _: cleanup())


def _access(gate: Gate, writable: bool) -> Callable[[str], None]:
    """The decision ``access`` asks for: read, and write too when ``writable``."""

    def check(rel: str) -> None:
        gate.read(rel)
        if writable:
            gate.write(rel)

    return check


class Broker:
    """The broker core over one workspace root.

    Every method takes an optional ``gate`` (:class:`~operations.Gate`): the policy's decision,
    asked with the root-relative path each call actually resolved, before it is used (see
    :class:`~operations.GatedBackend`). Without one nothing is refused but by confinement.

    Args:
        root: the workspace directory (canonicalised once; both spellings are accepted in paths).
        resolver: ``"openat2"`` or ``"walk"`` to force a resolution strategy (tests); by default
            ``openat2`` where the kernel allows it.
        max_read_bytes: the largest file ``read_file`` returns (:class:`~operations.TooLarge`
            beyond it).
        fsync: whether ``write_file`` flushes the file to disk before renaming it into place.
        search_engine: ``"rg"``, ``"python"`` or ``"auto"`` (``rg`` when it can be confined
            under Landlock, see ``_rg``).
        sandbox: the Landlock sandbox every command (bash and PowerShell) runs in, usually
            ``Sandbox.for_policy(policy, root)`` (``broker._landlock``); ``None`` runs commands
            without one. The caller keeps ownership and closes it after :meth:`aclose`.
        exec_policy: the policy's ``[exec]`` table, for the limits every command runs under
            (``pids_max``, ``memory_max``, ``kill_grace``); ``None`` uses its defaults.
        process_policy: the policy's ``[process]`` table, for processes that outlive a call
            (:attr:`processes`); ``None`` uses its defaults.
        use_cgroups: how command trees are tracked: ``None`` detects (cgroup v2 where
            writable), ``False`` forces the ``/proc`` fallback (tests run both), ``True``
            requires cgroups (see :class:`~broker._process.ProcessManager`).
    """

    def __init__(
        self,
        root: str,
        *,
        resolver: str | None = None,
        max_read_bytes: int = DEFAULT_MAX_READ_BYTES,
        fsync: bool = False,
        search_engine: str = "auto",
        sandbox: Ruleset | None = None,
        exec_policy: ExecPolicy | None = None,
        process_policy: ProcessPolicy | None = None,
        use_cgroups: bool | None = None,
    ) -> None:
        self._root = Root(root, strategy=resolver)
        self._use_cgroups = use_cgroups
        self._exec_policy = exec_policy if exec_policy is not None else ExecPolicy()
        self._sandbox = sandbox
        self._max_read = max_read_bytes
        self._fsync = fsync
        self._use_rg = _rg.usable() if search_engine == "auto" else search_engine == "rg"
        self._process_policy = process_policy if process_policy is not None else ProcessPolicy()
        self._processes: ProcessManager | None = None
        self._commands_started = False
        self._retired: list[ProcessManager] = []  # started only to answer capabilities()
        self._table: ProcessTable | None = None
        self._threads: set[asyncio.Future[Any]] = set()
        self._closed = False

    decides_on_resolved_paths: Literal[True] = True

    # --- identity -----------------------------------------------------------------------------

    @property
    def root(self) -> str:
        return self._root.path

    @property
    def resolver(self) -> Root:
        """The confinement resolver (for front-ends that need raw fds, e.g. SFTP)."""
        return self._root

    def capabilities(self) -> dict[str, object]:
        """What this broker runs on and enforces, as every transport reports it.

        Keys: ``resolver`` (``openat2`` or ``walk``), ``openat2_available``, ``search`` (``rg``
        or ``python``), ``tracking`` (``cgroup`` or ``proc``) and ``cgroup_kill``,
        ``command_sandbox`` (commands run under Landlock), ``landlock_abi``, ``powershell``, and
        ``limits``: every key of ``opsbroker.v1.codec.LIMIT_KEYS``, ``None`` where this core
        enforces none (the policy's output, write and timeout limits are the guard's, so a
        front-end adds them; ``chunk_bytes`` is a wire size). Asking starts the process
        manager (a later :meth:`use_sandbox` still applies), so tracking and cgroup limits
        are what commands will actually get.

        Raises:
            Unavailable: after :meth:`aclose`.
        """
        caps = self._root.capabilities()
        processes = self._manager("capabilities").capabilities()
        table = self._process_policy
        caps["search"] = "rg" if self._use_rg else "python"
        caps["tracking"] = "cgroup" if processes.cgroup_kill else "proc"
        caps["cgroup_kill"] = processes.cgroup_kill
        caps["command_sandbox"] = self._sandbox is not None
        caps["landlock_abi"] = _rg.landlock_abi()
        caps["powershell"] = any(shutil.which(name) for name in POWERSHELL_NAMES)
        caps["limits"] = {
            "max_read_bytes": self._max_read,
            "max_write_bytes": None,
            "max_output_bytes": None,
            "default_timeout": None,
            "max_timeout": None,
            "chunk_bytes": None,
            "pids_max": processes.pids_max,
            "memory_max": processes.memory_max,
            "max_processes_per_principal": table.max_per_principal,
            "max_processes": table.max_total,
            "ring_bytes": table.ring_bytes,
            "max_process_lifetime": table.max_lifetime,
        }
        return caps

    @property
    def sandbox(self) -> Ruleset | None:
        """The Landlock ruleset commands run in (``None``: none)."""
        return self._sandbox

    def use_sandbox(self, sandbox: Ruleset) -> None:
        """Run every command of this broker in ``sandbox`` (for a server that was handed a
        broker built without one and whose policy requires it).

        Raises:
            InvalidArgument: commands already ran under another sandbox, or none.
        """
        if sandbox is self._sandbox:
            return
        if self._processes is not None and not self._commands_started:
            # Started only to answer capabilities(): the next command gets one with the sandbox.
            self._retired.append(self._processes)
            self._processes = None
        if self._processes is not None:
            raise InvalidArgument(
                "serve",
                self.root,
                "this broker already ran commands without the policy's sandbox; build it with "
                "Broker(root, sandbox=...) instead",
            )
        self._sandbox = sandbox

    @property
    def powershell(self) -> ShellExec:
        return ShellExec(functools.partial(self._run, "powershell", powershell_argv))

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._table is not None:
            await self._table.aclose()
        for manager in (*self._retired, self._processes):
            if manager is not None:
                await manager.aclose()
        if self._threads:
            await asyncio.gather(*self._threads, return_exceptions=True)
        self._root.close()

    @property
    def processes(self) -> ProcessTable:
        """Processes that outlive a call (:class:`~operations.GatedProcessOperations`): started
        like ``exec``, kept in this core, killed by :meth:`aclose`."""
        if self._table is None:
            self._table = ProcessTable(self._process_policy, self._process_manager, self._open_cwd)
        return self._table

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # --- read side ----------------------------------------------------------------------------

    async def read_file(self, path: str, *, gate: Gate | None = None) -> bytes:
        fd, info = self._root.open_file("read_file", path, gate and gate.read)
        if info.st_size > INLINE_READ_BYTES:
            # The thread owns the fd from here: a cancelled caller must not close it under it.
            return await _treewalk.run_in_thread(
                functools.partial(self._read_and_close, path, fd, info.st_size)
            )
        return self._read_and_close(path, fd, info.st_size)

    def _read_and_close(self, path: str, fd: int, size: int) -> bytes:
        try:
            if size > self._max_read:
                raise self._too_large(path)
            return _read_fd(fd, self._max_read, size)
        except OverflowError:
            raise self._too_large(path) from None
        finally:
            os.close(fd)

    async def read_chunks(
        self, path: str, *, chunk_size: int = READ_CHUNK, gate: Gate | None = None
    ) -> AsyncGenerator[bytes, None]:
        """``read_file`` in pieces of at most ``chunk_size`` bytes, for files of any size.

        The same confinement and errors as ``read_file`` (raised before the first piece), but
        not its ``max_read_bytes``: only one piece is in memory at a time (a policy bounds the
        size, see ``GuardedBackend.read_chunks``). Pieces of files above ``INLINE_READ_BYTES``
        that are not in the page cache are read in threads.
        """
        if chunk_size < 1:
            raise InvalidArgument("read_file", path, f"chunk_size must be >= 1, got {chunk_size}")
        fd, info = self._root.open_file("read_file", path, gate and gate.read)
        jobs = _FdJobs(self._threads)
        try:
            if info.st_size <= INLINE_READ_BYTES:
                while piece := os.read(fd, chunk_size):
                    yield piece
                return
            # Larger files: what the page cache holds is read on the loop (a thread hop per
            # piece would cost more than the copy); only a read that would block goes to a
            # thread.
            buffer = bytearray(chunk_size)
            offset = 0
            while True:
                cached = _read_cached(fd, buffer, offset)
                piece = (
                    await jobs.run(os.pread, fd, chunk_size, offset) if cached is None else cached
                )
                if not piece:
                    return
                offset += len(piece)
                yield piece
        except OSError as exc:
            raise errno_error("read_file", path, exc) from None
        finally:
            jobs.then(functools.partial(os.close, fd))

    async def read_small(self, path: str, limit: int, *, gate: Gate | None = None) -> bytes | None:
        """``read_file`` of a file of at most ``limit`` bytes, else ``None`` (see
        :func:`operations.read_small`): one open, one read on the loop, no stream to set up."""
        if limit > INLINE_READ_BYTES:  # not a small read: the streaming path, threads and all
            return await read_small_streamed(self, path, limit, gate=gate)
        fd, info = self._root.open_file("read_file", path, gate and gate.read)
        try:
            if info.st_size > limit:
                return None
            data = os.read(fd, limit + 1)  # short only at the end of the file
        except OSError as exc:
            raise errno_error("read_file", path, exc) from None
        finally:
            os.close(fd)
        if len(data) > limit:
            return None  # it grew meanwhile
        if len(data) > self._max_read:
            raise self._too_large(path)
        return data

    def _too_large(self, path: str) -> TooLarge:
        return TooLarge("read_file", path, f"larger than the read limit of {self._max_read} bytes")

    async def access(self, path: str, *, writable: bool = False, gate: Gate | None = None) -> None:
        self._root.access("access", path, writable=writable, check=gate and _access(gate, writable))

    async def detect_image_mime_type(self, path: str, *, gate: Gate | None = None) -> str | None:
        fd, _ = self._root.open_file("detect_image_mime_type", path, gate and gate.read)
        try:
            return sniff_image_mime_type(os.read(fd, IMAGE_SNIFF_BYTES))
        finally:
            os.close(fd)

    async def exists(self, path: str, *, gate: Gate | None = None) -> bool:
        try:
            self._root.stat("exists", path, gate and gate.seen)
        except (InvalidArgument, Unavailable, EscapesRoot):
            raise  # an escape is refused like a read of it, never "not found"
        except OpsError:
            return False  # missing, dangling, a loop: nothing usable there
        return True

    async def stat(self, path: str, *, gate: Gate | None = None) -> FileStat:
        return _file_stat(self._root.stat("stat", path, gate and gate.seen))

    async def lstat(self, path: str, *, gate: Gate | None = None) -> FileStat:
        return _file_stat(self._root.lstat("lstat", path, gate and gate.seen))

    async def is_directory(self, path: str, *, gate: Gate | None = None) -> bool:
        return st.S_ISDIR(self._root.stat("is_directory", path, gate and gate.seen).st_mode)

    async def readdir(self, path: str, *, gate: Gate | None = None) -> list[str]:
        return [name for name, _ in self._root.list_dir("readdir", path, gate and gate.read)]

    async def list_dir(self, path: str, *, gate: Gate | None = None) -> list[DirEntry]:
        entries = self._root.list_dir("list_dir", path, gate and gate.read)
        return [DirEntry(name, _kind(kind)) for name, kind in entries]

    # --- write side ---------------------------------------------------------------------------

    async def write_file(
        self,
        path: str,
        content: bytes | str,
        *,
        mode: int | None = None,
        gate: Gate | None = None,
    ) -> None:
        mode = check_mode(mode, "write_file", path)
        data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
        self._root.write(
            "write_file", path, data, fsync=self._fsync, check=gate and gate.write, mode=mode
        )

    async def write_chunks(
        self,
        path: str,
        chunks: AsyncIterable[bytes],
        *,
        mode: int | None = None,
        gate: Gate | None = None,
    ) -> None:
        """``write_file`` with content that arrives in pieces, for files of any size.

        The same confinement, atomicity and errors as ``write_file``: the pieces go to a temp
        file beside ``path`` (created through the parent directory's fd) that is renamed over
        ``path`` at the end. If ``chunks`` raises, or the call is cancelled, the temp file is
        removed and nothing is visible at ``path``.
        """
        mode = check_mode(mode, "write_file", path)
        target = self._root.open_atomic("write_file", path, gate and gate.write, mode)
        jobs = _FdJobs(self._threads)
        threaded = False
        try:
            batch = bytearray()
            async for piece in chunks:
                batch += piece
                if len(batch) >= WRITE_BATCH:
                    data, batch = batch, bytearray()
                    threaded = True
                    await jobs.run(target.write, data)
            if threaded or self._fsync or len(batch) > INLINE_READ_BYTES:
                await jobs.run(self._finish_write, target, batch)
            else:
                self._finish_write(target, batch)
        except OSError as exc:
            jobs.then(target.discard)
            raise errno_error("write_file", path, exc) from None
        except BaseException:
            jobs.then(target.discard)
            raise

    def _finish_write(self, target: AtomicFile, rest: bytearray) -> None:
        target.write(rest)
        target.commit(self._fsync)

    async def mkdir(self, path: str, *, gate: Gate | None = None) -> None:
        self._root.mkdir("mkdir", path, parents=True, check=gate and gate.write)

    async def remove(self, path: str, *, recursive: bool = False, gate: Gate | None = None) -> None:
        if recursive:
            # A big tree is removed in a thread; aclose() waits for it before closing the root
            # fd it resolves from, even if this caller is cancelled meanwhile.
            work = asyncio.ensure_future(
                asyncio.to_thread(self._root.remove, "remove", path, recursive=True, gate=gate)
            )
            self._threads.add(work)
            work.add_done_callback(_forget(self._threads))
            await asyncio.shield(work)
        else:
            self._root.remove("remove", path, gate=gate)

    async def rename(self, source: str, destination: str, *, gate: Gate | None = None) -> None:
        if gate is not None:  # a moved tree is listed and checked entry by entry: in a thread
            await asyncio.to_thread(self._root.rename, "rename", source, destination, gate=gate)
            return
        self._root.rename("rename", source, destination)

    # --- find and grep ------------------------------------------------------------------------

    async def glob(
        self,
        pattern: str,
        cwd: str,
        *,
        ignore: Sequence[str] = (),
        limit: int = 1000,
        gate: Gate | None = None,
    ) -> list[str]:
        with _treewalk.TreeAccess(self._root, "glob", cwd, gate) as tree:
            found = await _treewalk.glob_in_thread(
                tree,
                lambda: glob_paths(
                    tree.list_dir,
                    tree.read_small,
                    pattern,
                    ignore=ignore,
                    limit=limit,
                    inherited=tree.inherited_rules(),
                ),
            )
            return found if gate is None else [name for name in found if not tree.hidden(name)]

    async def search(
        self,
        pattern: str,
        path: str,
        *,
        glob: str | None = None,
        ignore_case: bool = False,
        literal: bool = False,
        limit: int = 100,
        gate: Gate | None = None,
    ) -> AsyncGenerator[SearchMatch, None]:
        matcher = LineMatcher(pattern, ignore_case=ignore_case, literal=literal)
        if limit < 1:
            return
        if not await self.is_directory(path):
            data = await self.read_file(path, gate=gate)
            for count, match in enumerate(search_file(matcher, path, data), start=1):
                yield match
                if count >= limit:
                    return
            return
        with _treewalk.TreeAccess(self._root, "search", path, gate) as tree:
            if self._use_rg and "\0" not in matcher.pattern:  # argv cannot carry a NUL
                results = _rg.search(
                    tree,
                    matcher,
                    path,
                    glob=glob,
                    limit=limit,
                    ignore_case=ignore_case,
                    literal=literal,
                )
            else:
                results = _treewalk.search(tree, matcher, path, glob=glob, limit=limit)
            async with contextlib.aclosing(results) as matches:
                async for match in matches:
                    if gate is None or not tree.hidden_match(match.path):
                        yield match  # never a read-denied file's lines

    # --- commands -----------------------------------------------------------------------------

    async def exec(
        self,
        command: str,
        cwd: str,
        *,
        on_data: OnData,
        signal: AbortSignal | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        gate: Gate | None = None,
    ) -> ExecResult:
        return await self._run("exec", bash_argv, command, cwd, on_data, signal, timeout, env, gate)

    async def exec_powershell(
        self,
        command: str,
        cwd: str,
        *,
        on_data: OnData,
        signal: AbortSignal | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        gate: Gate | None = None,
    ) -> ExecResult:
        """``powershell.exec`` with a gate (see :class:`~operations.GatedBackend`)."""
        return await self._run(
            "powershell", powershell_argv, command, cwd, on_data, signal, timeout, env, gate
        )

    async def _run(
        self,
        op: str,
        argv_builder: Callable[[str], list[str]],
        command: str,
        cwd: str,
        on_data: OnData,
        signal: AbortSignal | None,
        timeout: float | None,
        env: Mapping[str, str] | None,
        gate: Gate | None = None,
    ) -> ExecResult:
        manager = self._process_manager(op)
        argv = argv_builder(command)
        cwd_fd = self._open_cwd(op, cwd, gate)
        try:
            result: ExecResult = await manager.exec(
                argv,
                cwd_fd=cwd_fd,
                cwd=cwd,
                on_data=on_data,
                signal=signal,
                timeout=timeout,
                env=None if env is None else {**MINIMAL_ENV, **env},
            )
            return result
        finally:
            os.close(cwd_fd)

    def _open_cwd(self, op: str, cwd: str, gate: Gate | None) -> int:
        """A command's working directory opened beneath the root (asking ``gate.read``)."""
        try:
            return self._root.open_dir(op, cwd, gate and gate.read)
        except (NotFound, NotADirectory) as exc:
            raise type(exc)(op, cwd, f"working directory: {exc.reason}") from None

    def _process_manager(self, op: str) -> ProcessManager:
        """The process manager commands run through (from now on, :meth:`use_sandbox` refuses
        to change their sandbox)."""
        manager = self._manager(op)
        self._commands_started = True
        return manager

    def _manager(self, op: str) -> ProcessManager:
        if self._closed:
            raise Unavailable(op, None, "the broker is closed")
        if self._processes is None:
            spec = self._exec_policy
            self._processes = ProcessManager(
                sandbox=self._sandbox,
                use_cgroups=self._use_cgroups,
                pids_max=spec.pids_max,
                memory_max=spec.memory_max,
                kill_grace=spec.kill_grace,
            )
        return self._processes
