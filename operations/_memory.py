"""The memory backend: every Operations interface over a virtual tree and scripted commands.

For CI harnesses and tests: no disk, no processes, same errors as the broker. ::

    ops = InMemoryOperations({"src/a.py": b"print(1)\\n", "link": Symlink("src"), "tmp/": Dir()})
    ops.commands.register("pytest -q", output="1 passed\\n")
    ... run the agent's tools against ``ops`` ...
    assert ops.snapshot()["src/a.py"] == b"print(2)\\n"
    assert [r.op for r in ops.log] == ["read_file", "write_file", "exec"]

Paths resolve beneath :attr:`root` (default ``/workspace``) with the rules of
:mod:`operations._vfs`; ``glob`` and ``search`` follow :mod:`operations._glob` and
:mod:`operations._search`; commands run on :mod:`operations._runner`. Every call is appended to
:attr:`log` as an :class:`OpRecord` (operation, path, outcome), the errors included.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat as stat_module
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from ._abort import AbortSignal
from ._chunked import FALLBACK_WRITE_LIMIT
from ._errors import (
    AlreadyExists,
    DirectoryNotEmpty,
    EscapesRoot,
    InvalidArgument,
    IsADirectory,
    NotADirectory,
    NotFound,
    NotRegularFile,
    OpsError,
    TooLarge,
    Unavailable,
)
from ._gate import MAX_TREE_CHECK, Gate
from ._gitignore import IgnoreRules, parent_ignore_rules
from ._memory_processes import MemoryProcesses
from ._mime import IMAGE_SNIFF_BYTES, sniff_image_mime_type
from ._mode import check_mode
from ._policy import ProcessPolicy
from ._runner import CommandRunner
from ._search import LineMatcher, search_file, search_tree
from ._timeout import check_timeout
from ._types import DirEntry, ExecResult, FileKind, FileStat, OnData, SearchMatch
from ._vfs import (
    DirNode,
    FileNode,
    LinkNode,
    Node,
    Resolved,
    SpecialNode,
    VirtualTree,
    kind_of,
    stat_of,
)
from ._walk import glob_paths

if TYPE_CHECKING:
    from ._protocols import Backend

__all__ = [
    "Dir",
    "Fifo",
    "File",
    "InMemoryOperations",
    "MemoryPowerShell",
    "OpRecord",
    "SeedValue",
    "Symlink",
]

SEARCH_YIELD_EVERY = 64
"""Matches streamed between two trips to the event loop, so a big search stays cooperative."""


@dataclass(frozen=True, slots=True)
class Symlink:
    """A symbolic link to seed (or found by ``snapshot``); ``target`` is kept verbatim."""

    target: str


@dataclass(frozen=True, slots=True)
class Dir:
    """A directory to seed (key ``"name/"`` or any key with this value)."""

    mode: int = 0o755


@dataclass(frozen=True, slots=True)
class File:
    """A regular file to seed with a mode (or mtime); plain ``bytes``/``str`` values get 0o644."""

    data: bytes
    mode: int = 0o644
    mtime: float | None = None


@dataclass(frozen=True, slots=True)
class Fifo:
    """A FIFO: listed and stat'ed, but never opened (reads give NotRegularFile)."""

    mode: int = 0o644


SeedValue = bytes | str | File | Dir | Symlink | Fifo | None
"""What a seed dict maps a path to (``None`` with a key ending in ``/``: a directory)."""


@dataclass(frozen=True, slots=True)
class OpRecord:
    """One performed operation: its name, the path as given, ``"ok"`` or the error code, and
    a detail (the command of ``exec``, the destination of ``rename``, the pattern of ``glob``).

    For ``exec`` the outcome is ``"exit:<code>"`` or ``"killed:<reason>"``.
    """

    op: str
    path: str
    outcome: str
    detail: str | None = None


class InMemoryOperations:
    """Every Operations interface over a :class:`~operations._vfs.VirtualTree`.

    Args:
        files: initial content, ``{relative-or-absolute path: value}`` (see :meth:`seed`).
        root: the workspace root in the virtual namespace.
        max_read_bytes / max_write_bytes: TooLarge above these sizes (``None``: no limit).
        max_output_bytes: a command that outputs more is killed (``KillReason.OUTPUT_LIMIT``).
        time_scale: multiplies scripted sleeps and timeouts (see ``_runner``).
        clock: the source of modification times (and of a started process's ``started_at``).
        process_policy: the ``[process]`` limits of :attr:`processes` (default: the policy's).

    Every method takes an optional ``gate`` (:class:`~operations.Gate`), asked with the
    root-relative path the call resolved (links followed) before it is used, as the broker core
    does (:class:`~operations.GatedBackend`).
    """

    decides_on_resolved_paths: Literal[True] = True

    def __init__(
        self,
        files: Mapping[str, SeedValue] | None = None,
        *,
        root: str = "/workspace",
        max_read_bytes: int | None = None,
        max_write_bytes: int | None = None,
        max_output_bytes: int | None = None,
        time_scale: float = 1.0,
        clock: Callable[[], float] = time.time,
        process_policy: ProcessPolicy | None = None,
    ) -> None:
        self.vfs = VirtualTree(root, clock=clock)
        self.max_read_bytes = max_read_bytes
        self.max_write_bytes = max_write_bytes
        self.max_output_bytes = max_output_bytes
        self.commands = CommandRunner(self, shell="bash", time_scale=time_scale)
        self._powershell = MemoryPowerShell(self, time_scale=time_scale)
        self._processes = MemoryProcesses(self, process_policy or ProcessPolicy())
        self.log: list[OpRecord] = []
        self._closed = False
        if files:
            self.seed(files)

    # -- harness helpers --------------------------------------------------------------------

    @classmethod
    def from_directory(cls, directory: str | os.PathLike[str], **options: object) -> Self:
        """A backend whose tree is a copy of ``directory`` (links copied as links, modes kept)."""
        top = Path(directory)
        files: dict[str, SeedValue] = {}
        for dirpath, dirnames, filenames in os.walk(top):
            for name in dirnames + filenames:
                full = Path(dirpath, name)
                rel = full.relative_to(top).as_posix()
                st = full.lstat()
                if stat_module.S_ISLNK(st.st_mode):
                    files[rel] = Symlink(os.readlink(full))
                elif stat_module.S_ISDIR(st.st_mode):
                    files[rel + "/"] = Dir(stat_module.S_IMODE(st.st_mode))
                elif stat_module.S_ISREG(st.st_mode):
                    mode = stat_module.S_IMODE(st.st_mode)
                    files[rel] = File(full.read_bytes(), mode, st.st_mtime)
                else:
                    files[rel] = Fifo(stat_module.S_IMODE(st.st_mode))
        return cls(files, **options)  # type: ignore[arg-type]

    @classmethod
    def from_cassette(
        cls,
        cassette: str | os.PathLike[str],
        *,
        mode: Literal["strict", "once", "new_episodes"] = "strict",
        live: Backend | None = None,
        **options: Any,
    ) -> InMemoryOperations:
        """A backend replaying a recorded session (:mod:`operations._replay`): the recorded tree,
        and commands answered from the recording. ``options`` go to the constructor.

        Raises:
            CassetteError: the cassette is missing, damaged, of another version, or names a
                path outside its root (the message names the file and line).
        """
        from ._replay import ReplayOperations

        return ReplayOperations(cassette, mode=mode, live=live, **options)

    def seed(self, files: Mapping[str, SeedValue]) -> None:
        """Add content, bypassing confinement and permissions (the harness is trusted).

        Keys are relative to the root, or absolute (e.g. ``/outside/secret`` for a decoy). Values:
        ``bytes``/``str`` (a 0o644 file), :class:`File`, :class:`Dir` (or a key ending in ``/``),
        :class:`Symlink`, :class:`Fifo`. Missing parents become directories.
        """
        now = self.vfs.clock()
        for key, value in files.items():
            path = key if key.startswith("/") else f"{self.vfs.root}/{key}"
            if key.endswith("/") or isinstance(value, Dir):
                mode = value.mode if isinstance(value, Dir) else 0o755
                self.vfs.make_dirs(path).mode = mode
                continue
            node: Node
            if isinstance(value, bytes | str):
                data = value.encode() if isinstance(value, str) else value
                node = FileNode(data, 0o644, now)
            elif isinstance(value, File):
                mtime = value.mtime if value.mtime is not None else now
                node = FileNode(value.data, value.mode, mtime)
            elif isinstance(value, Symlink):
                node = LinkNode(value.target, now)
            elif isinstance(value, Fifo):
                node = SpecialNode(value.mode, now)
            else:
                raise TypeError(
                    f"seed value for {key!r} must be bytes, str, File, Dir, Symlink or Fifo"
                )
            self.vfs.put_raw(path, node)

    def snapshot(self, *, modes: bool = False) -> dict[str, bytes | File | Dir | Symlink | Fifo]:
        """The tree under the root as a seed dict, keys sorted.

        Files are ``bytes`` and only empty directories appear (``"d/": Dir()``), which keeps
        assertions short; with ``modes=True`` files are :class:`File` (data and mode) and every
        directory appears with its mode.
        """
        out: dict[str, bytes | File | Dir | Symlink | Fifo] = {}

        def visit(directory: DirNode, prefix: str) -> None:
            for name in sorted(directory.children):
                node = directory.children[name]
                rel = prefix + name
                if isinstance(node, DirNode):
                    if modes or not node.children:
                        out[rel + "/"] = Dir(node.mode)
                    visit(node, rel + "/")
                elif isinstance(node, FileNode):
                    out[rel] = File(node.data, node.mode) if modes else node.data
                elif isinstance(node, LinkNode):
                    out[rel] = Symlink(node.target)
                else:
                    out[rel] = Fifo(node.mode)

        visit(self.vfs.root_dir, "")
        return dict(sorted(out.items()))

    @property
    def root(self) -> str:
        return self.vfs.root

    @property
    def powershell(self) -> MemoryPowerShell:
        return self._powershell

    def capabilities(self) -> dict[str, object]:
        """What this backend models, in the shape of ``Broker.capabilities()``: paths, search and
        commands are all in memory (``memory``), nothing runs under a kernel sandbox or cgroup,
        and the limits are the ones given to it (``None``: none)."""
        policy = self._processes.policy
        return {
            "resolver": "memory",
            "openat2_available": False,
            "search": "memory",
            "tracking": "memory",
            "cgroup_kill": False,
            "command_sandbox": False,
            "landlock_abi": 0,
            "powershell": True,
            "limits": {
                "max_read_bytes": self.max_read_bytes,
                "max_write_bytes": self.max_write_bytes,
                "max_output_bytes": self.max_output_bytes,
                "default_timeout": None,
                "max_timeout": None,
                "chunk_bytes": None,
                "pids_max": None,
                "memory_max": None,
                "max_processes_per_principal": policy.max_per_principal,
                "max_processes": policy.max_total,
                "ring_bytes": policy.ring_bytes,
                "max_process_lifetime": policy.max_lifetime,
            },
        }

    @property
    def processes(self) -> MemoryProcesses:
        """Processes that outlive a call: scripted commands run in the background
        (:mod:`operations._memory_processes`)."""
        return self._processes

    # -- bookkeeping --------------------------------------------------------------------------

    def _note(self, op: str, path: str, outcome: str, detail: str | None = None) -> None:
        self.log.append(OpRecord(op, path, outcome, detail))

    @contextmanager
    def _op(self, op: str, path: str, detail: str | None = None) -> Iterator[None]:
        for value in (path, detail) if op == "rename" else (path,):
            if not isinstance(value, str):
                self.log.append(OpRecord(op, repr(path), InvalidArgument.code, detail))
                raise InvalidArgument(op, repr(value), "a path must be a string")
        if self._closed:
            error = Unavailable(op, path, "the memory backend is closed")
            self.log.append(OpRecord(op, path, error.code, detail))
            raise error
        try:
            yield
        except OpsError as error:
            self.log.append(OpRecord(op, path, error.code, detail))
            raise
        self.log.append(OpRecord(op, path, "ok", detail))

    def _existing(
        self, op: str, path: str, *, follow: bool = True, check: Check | None = None
    ) -> tuple[Resolved, Node]:
        resolved = self.vfs.resolve(op, path, follow=follow)
        if check is not None:
            check(resolved.rel)  # a missing name too: a refusal must not tell what exists
        if resolved.node is None:
            raise NotFound(op, path)
        return resolved, resolved.node

    def _regular_file(self, op: str, path: str, check: Check | None = None) -> FileNode:
        _, node = self._existing(op, path, check=check)
        if isinstance(node, DirNode):
            raise IsADirectory(op, path)
        if not isinstance(node, FileNode):
            raise NotRegularFile(op, path)
        self.vfs.require_mode(op, path, node, 0o400, "readable")
        return node

    def _directory(self, op: str, path: str, check: Check | None = None) -> DirNode:
        _, node = self._existing(op, path, check=check)
        if not isinstance(node, DirNode):
            raise NotADirectory(op, path)
        return node

    def _final_entry(self, op: str, path: str) -> Node | None:
        """What ``path`` names itself (trailing slashes ignored, final link not followed)."""
        bare = path.rstrip("/")
        if not bare or bare.rsplit("/", 1)[-1] in (".", ".."):
            return None
        try:
            return self.vfs.resolve(op, bare, follow=False).node
        except OpsError:
            return None

    def _final_link(self, op: str, path: str) -> LinkNode | None:
        """The symlink that ``path`` names itself (trailing slashes ignored), if it is one."""
        node = self._final_entry(op, path)
        return node if isinstance(node, LinkNode) else None

    def _mutation_path(self, op: str, path: str) -> str:
        """The path remove and rename act on, checked before resolving anything.

        A trailing ``/`` or ``/.`` means "a directory", kept as one trailing ``/``. Such a path,
        or one ending in ``.`` or ``..``, is first resolved (an escape is EscapesRoot); then the
        root, a final ``.`` or ``..`` are refused (InvalidArgument), and so is a symlink named
        with a trailing slash (NotADirectory: the link is named without it), as in the broker
        core.
        """
        bare, wants_dir = _strip_dir_suffix(path)
        if wants_dir or bare.rsplit("/", 1)[-1] in (".", ".."):
            # A path that names a directory is resolved first, so that an escape says so.
            with contextlib.suppress(NotFound):
                self.vfs.resolve(op, path, follow=True)
        if bare.rsplit("/", 1)[-1] in (".", "..") or not self.vfs.relative(op, bare).strip("/"):
            raise InvalidArgument(
                op, path, "cannot act on the root or a path ending in '.' or '..'"
            )
        if wants_dir and self._final_link(op, bare) is not None:
            raise NotADirectory(op, path, "a symlink with a trailing slash; name the link itself")
        return bare + "/" if wants_dir else bare

    # -- ReadOperations -----------------------------------------------------------------------

    async def read_file(self, path: str, *, gate: Gate | None = None) -> bytes:
        with self._op("read_file", path):
            node = self._regular_file("read_file", path, gate and gate.read)
            if self.max_read_bytes is not None and len(node.data) > self.max_read_bytes:
                raise TooLarge(
                    "read_file",
                    path,
                    f"file is {len(node.data)} bytes; the limit is {self.max_read_bytes}",
                )
            return node.data

    async def access(self, path: str, *, writable: bool = False, gate: Gate | None = None) -> None:
        with self._op("access", path):
            resolved, node = self._existing("access", path, check=gate and gate.read)
            if gate is not None and writable:
                gate.write(resolved.rel)
            self.vfs.require_mode("access", path, node, 0o400, "readable")
            if writable:
                self.vfs.require_mode("access", path, node, 0o200, "writable")

    async def detect_image_mime_type(self, path: str, *, gate: Gate | None = None) -> str | None:
        with self._op("detect_image_mime_type", path):
            node = self._regular_file("detect_image_mime_type", path, gate and gate.read)
            return sniff_image_mime_type(node.data[:IMAGE_SNIFF_BYTES])

    async def read_chunks(
        self, path: str, *, chunk_size: int, gate: Gate | None = None
    ) -> AsyncIterator[bytes]:
        """``read_file`` sliced (the content is in memory anyway)."""
        data = await self.read_file(path, gate=gate)
        for start in range(0, len(data), chunk_size):
            yield data[start : start + chunk_size]

    async def read_small(self, path: str, limit: int, *, gate: Gate | None = None) -> bytes | None:
        """``read_file`` of a file of at most ``limit`` bytes, else ``None``."""
        data = await self.read_file(path, gate=gate)
        return data if len(data) <= limit else None

    # -- WriteOperations ----------------------------------------------------------------------

    async def write_file(
        self,
        path: str,
        content: bytes | str,
        *,
        mode: int | None = None,
        gate: Gate | None = None,
    ) -> None:
        op = "write_file"
        with self._op(op, path):
            given = check_mode(mode, op, path)
            data = content.encode() if isinstance(content, str) else content
            if self.max_write_bytes is not None and len(data) > self.max_write_bytes:
                raise TooLarge(op, path, f"{len(data)} bytes; the limit is {self.max_write_bytes}")
            if path.endswith("/") or path.rsplit("/", 1)[-1] in (".", ".."):
                # "name/" asks for a directory: writing a file there is never possible. Resolve
                # it first anyway, so that an escape or a loop says so.
                with contextlib.suppress(NotFound):
                    self.vfs.resolve(op, path, follow=True)
                raise IsADirectory(op, path)
            resolved = self.vfs.resolve(op, path, follow=True)
            node = resolved.node
            if resolved.name is None or isinstance(node, DirNode):
                raise IsADirectory(op, path)
            if isinstance(node, SpecialNode):
                raise NotRegularFile(op, path)
            if gate is not None:
                gate.write(resolved.rel)
            self.vfs.require_writable_dir(op, path, resolved.parent)
            bits = 0o644
            if isinstance(node, FileNode):
                self.vfs.require_mode(op, path, node, 0o200, "writable")
                bits = node.mode
            # Atomic replace: a new node takes the name, with the mode given, else the replaced
            # file's own.
            bits = bits if given is None else given
            resolved.parent.children[resolved.name] = FileNode(data, bits, self.vfs.clock())

    async def write_chunks(
        self,
        path: str,
        chunks: AsyncIterable[bytes],
        *,
        mode: int | None = None,
        gate: Gate | None = None,
    ) -> None:
        """``write_file`` of the concatenated ``chunks`` (held in memory, as the file will be)."""
        buffer = bytearray()
        async for piece in chunks:
            buffer += piece
            if len(buffer) > FALLBACK_WRITE_LIMIT:
                raise TooLarge(
                    "write_file",
                    path,
                    f"content exceeds {FALLBACK_WRITE_LIMIT} bytes on this backend",
                )
        await self.write_file(path, bytes(buffer), mode=mode, gate=gate)

    async def mkdir(self, path: str, *, gate: Gate | None = None) -> None:
        op = "mkdir"
        with self._op(op, path):
            # A path ending in ".." names an existing directory; nothing is created for it.
            create = _strip_dir_suffix(path)[0].rsplit("/", 1)[-1] != ".."
            try:
                resolved = self.vfs.resolve(
                    op, path, follow=True, create_dirs=create, on_create=gate and gate.write
                )
            except NotADirectory:
                # "file/": an existing name that is not a directory is "already exists", as
                # mkdir(2) says; a file on the way ("file/sub") stays NotADirectory.
                if isinstance(self._final_entry(op, path), FileNode | SpecialNode):
                    raise AlreadyExists(op, path) from None
                raise
            node = resolved.node
            if isinstance(node, DirNode):
                return
            if node is not None or resolved.via_final_link or resolved.name is None:
                raise AlreadyExists(op, path)
            if gate is not None:
                gate.write(resolved.rel)
            self.vfs.require_writable_dir(op, path, resolved.parent)
            resolved.parent.children[resolved.name] = DirNode(mtime=self.vfs.clock())

    # -- LsOperations / FindOperations / GrepOperations --------------------------------------

    async def exists(self, path: str, *, gate: Gate | None = None) -> bool:
        with self._op("exists", path):
            try:
                resolved = self.vfs.resolve("exists", path, follow=True)
            except (InvalidArgument, EscapesRoot):
                raise  # an escape is refused like a read of it, never "not found"
            except OpsError:
                return False
            if resolved.node is not None and gate is not None:
                gate.seen(resolved.rel)
            return resolved.node is not None

    async def stat(self, path: str, *, gate: Gate | None = None) -> FileStat:
        with self._op("stat", path):
            return stat_of(self._existing("stat", path, check=gate and gate.seen)[1])

    async def readdir(self, path: str, *, gate: Gate | None = None) -> list[str]:
        with self._op("readdir", path):
            directory = self._directory("readdir", path, gate and gate.read)
            self.vfs.require_mode("readdir", path, directory, 0o400, "readable")
            return sorted(directory.children)

    async def is_directory(self, path: str, *, gate: Gate | None = None) -> bool:
        with self._op("is_directory", path):
            node = self._existing("is_directory", path, check=gate and gate.seen)[1]
            return isinstance(node, DirNode)

    async def glob(
        self,
        pattern: str,
        cwd: str,
        *,
        ignore: Sequence[str] = (),
        limit: int = 1000,
        gate: Gate | None = None,
    ) -> list[str]:
        with self._op("glob", cwd, pattern):
            resolved, top = self._existing("glob", cwd, check=gate and gate.read)
            if not isinstance(top, DirNode):
                raise NotADirectory("glob", cwd)
            list_dir, read_file = self._walk_callbacks("glob", cwd, top)
            inherited = self._inherited_rules("glob", resolved.rel)
            found = glob_paths(
                list_dir, read_file, pattern, ignore=ignore, limit=limit, inherited=inherited
            )
            if gate is None:
                return found
            return [name for name in found if not gate.hidden(_join(resolved.rel, name))]

    def _inherited_rules(self, op: str, rel: str) -> IgnoreRules:
        """The ignore rules of the directories above ``rel`` (root-relative), up to the root."""
        _, read_file = self._walk_callbacks(op, self.vfs.root, self.vfs.root_dir)
        return parent_ignore_rules(rel, read_file)

    def _walk_callbacks(
        self, op: str, base: str, top: DirNode
    ) -> tuple[Callable[[str], list[tuple[str, FileKind]]], Callable[[str], bytes | None]]:
        """Walk callbacks over the tree below ``top``; links are never followed."""

        def lookup(rel: str) -> Node | None:
            node: Node = top
            for part in (p for p in rel.split("/") if p):
                if not isinstance(node, DirNode) or not node.mode & 0o100:
                    return None
                found = node.children.get(part)
                if found is None:
                    return None
                node = found
            return node

        def list_dir(rel: str) -> list[tuple[str, FileKind]]:
            node = lookup(rel)
            if not isinstance(node, DirNode):
                raise NotADirectory(op, f"{base}/{rel}")
            self.vfs.require_mode(op, f"{base}/{rel}", node, 0o500, "readable")
            return [(name, kind_of(child)) for name, child in node.children.items()]

        def read_file(rel: str) -> bytes | None:
            node = lookup(rel)
            if isinstance(node, FileNode) and node.mode & 0o400:
                return node.data
            return None

        return list_dir, read_file

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
    ) -> AsyncIterator[SearchMatch]:
        op = "search"
        with self._op(op, path, pattern):
            matcher = LineMatcher(pattern, ignore_case=ignore_case, literal=literal)
            resolved, node = self._existing(op, path, check=gate and gate.read)
            if isinstance(node, DirNode):
                base = path.rstrip("/")
                list_dir, read_file = self._walk_callbacks(op, base, node)
                inherited = self._inherited_rules(op, resolved.rel)
                found = list(
                    search_tree(
                        matcher,
                        path,
                        list_dir,
                        read_file,
                        glob=glob,
                        limit=limit,
                        inherited=inherited,
                    )
                )
                if gate is not None:  # never a read-denied file's lines
                    found = [
                        m
                        for m in found
                        if not gate.hidden(_join(resolved.rel, m.path[len(base) + 1 :]))
                    ]
            elif isinstance(node, FileNode) and node.mode & 0o400:
                found = list(search_file(matcher, path, node.data))[: max(0, limit)]
            else:
                found = []
        # Matches are collected before the first yield, so the tree cannot change under the walk.
        for index, match in enumerate(found):
            yield match
            if index % SEARCH_YIELD_EVERY == SEARCH_YIELD_EVERY - 1:
                await asyncio.sleep(0)

    # -- BashOperations -----------------------------------------------------------------------

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
        return await self._exec(
            self.commands, "exec", command, cwd, on_data, signal, timeout, env, gate
        )

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
        return await self._exec(
            self._powershell.commands,
            "powershell",
            command,
            cwd,
            on_data,
            signal,
            timeout,
            env,
            gate,
        )

    async def _exec(
        self,
        runner: CommandRunner,
        op: str,
        command: str,
        cwd: str,
        on_data: OnData,
        signal: AbortSignal | None,
        timeout: float | None,
        env: Mapping[str, str] | None,
        gate: Gate | None = None,
    ) -> ExecResult:
        try:
            if self._closed:
                raise Unavailable(op, cwd, "the memory backend is closed")
            self._directory(op, cwd, gate and gate.read)
            check_timeout(timeout, op, cwd)
        except OpsError as error:
            self.log.append(OpRecord(op, cwd, error.code, command))
            raise
        try:
            result = await runner.run(
                command,
                cwd,
                on_data=on_data,
                signal=signal,
                timeout=timeout,
                env=env,
                max_output_bytes=self.max_output_bytes,
            )
        except asyncio.CancelledError:
            self.log.append(OpRecord(op, cwd, "killed:cancelled", command))
            raise
        if result.kill_reason is not None:
            outcome = f"killed:{result.kill_reason.value}"
        else:
            outcome = f"exit:{result.exit_code}"
        self.log.append(OpRecord(op, cwd, outcome, command))
        return result

    # -- FileSystemOperations -----------------------------------------------------------------

    async def lstat(self, path: str, *, gate: Gate | None = None) -> FileStat:
        with self._op("lstat", path):
            return stat_of(self._existing("lstat", path, follow=False, check=gate and gate.seen)[1])

    async def remove(self, path: str, *, recursive: bool = False, gate: Gate | None = None) -> None:
        op = "remove"
        with self._op(op, path):
            resolved, node = self._existing(op, self._mutation_path(op, path), follow=False)
            if resolved.name is None:
                raise InvalidArgument(op, path, "cannot remove '.', '..' or the workspace root")
            if resolved.via_final_link:
                raise NotADirectory(
                    op, path, "a symlink with a trailing slash; remove the link itself"
                )
            if isinstance(node, DirNode) and node.children and not recursive:
                raise DirectoryNotEmpty(op, path)
            if gate is not None:
                gate.write(resolved.rel)
                for rel in _tree(node, gate):
                    gate.write(f"{resolved.rel}/{rel}", shown=f"{path.rstrip('/')}/{rel}")
            self.vfs.require_writable_dir(op, path, resolved.parent)
            del resolved.parent.children[resolved.name]

    async def rename(self, source: str, destination: str, *, gate: Gate | None = None) -> None:
        op = "rename"
        with self._op(op, source, destination):
            source_path = self._mutation_path(op, source)
            destination_path = self._mutation_path(op, destination)
            src, node = self._existing(op, source_path, follow=False)
            wants_dir = source_path.endswith("/") or destination_path.endswith("/")
            if wants_dir and not isinstance(node, DirNode):
                raise NotADirectory(op, source, "a trailing slash names a directory")
            dst = self.vfs.resolve(op, destination_path, follow=False)
            if src.name is None or dst.name is None:
                bad = source if src.name is None else destination
                raise InvalidArgument(op, bad, "cannot rename '.', '..' or the workspace root")
            if src.via_final_link or dst.via_final_link:
                raise NotADirectory(
                    op, source, "a symlink with a trailing slash; name the link itself"
                )
            if src.parent is dst.parent and src.name == dst.name:
                return
            target = dst.node
            if isinstance(node, DirNode):
                if any(d is node for d in dst.dirs):
                    raise InvalidArgument(op, destination, "cannot move a directory inside itself")
                if isinstance(target, DirNode) and target.children:
                    raise DirectoryNotEmpty(op, destination)
                if target is not None and not isinstance(target, DirNode):
                    raise NotADirectory(op, destination)
            else:
                if isinstance(target, DirNode):
                    raise IsADirectory(op, destination)
                if dst.dir_required:
                    raise NotADirectory(op, destination)
            if gate is not None:
                gate.move(src.rel, dst.rel)
                for rel in _tree(node, gate):
                    gate.move(
                        f"{src.rel}/{rel}", f"{dst.rel}/{rel}", shown=f"{source.rstrip('/')}/{rel}"
                    )
            self.vfs.require_writable_dir(op, source, src.parent)
            self.vfs.require_writable_dir(op, destination, dst.parent)
            del src.parent.children[src.name]
            dst.parent.children[dst.name] = node

    async def list_dir(self, path: str, *, gate: Gate | None = None) -> list[DirEntry]:
        with self._op("list_dir", path):
            directory = self._directory("list_dir", path, gate and gate.read)
            self.vfs.require_mode("list_dir", path, directory, 0o400, "readable")
            return [
                DirEntry(name, kind_of(directory.children[name]))
                for name in sorted(directory.children)
            ]

    # -- lifecycle ----------------------------------------------------------------------------

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._processes.aclose()
        await self.commands.shutdown()
        await self._powershell.commands.shutdown()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


Check = Callable[[str], None]


def _join(base: str, rel: str) -> str:
    return f"{base}/{rel}" if base else rel


def _tree(node: Node, gate: Gate) -> list[str]:
    """The entries below ``node`` if it is a directory (relative to it, links not followed);
    more than :data:`~operations.MAX_TREE_CHECK` is the gate's refusal."""
    found: list[str] = []
    pending: list[tuple[Node, str]] = [(node, "")]
    while pending:
        current, prefix = pending.pop()
        if not isinstance(current, DirNode):
            continue
        for name, child in current.children.items():
            found.append(prefix + name)
            if len(found) > MAX_TREE_CHECK:
                raise gate.tree_too_large()
            pending.append((child, f"{prefix}{name}/"))
    return found


def _strip_dir_suffix(path: str) -> tuple[str, bool]:
    """``path`` without its trailing ``/`` and ``/.`` runs, and whether it had any (a directory
    is meant)."""
    bare = path
    while bare.endswith(("/", "/.")) and bare.rstrip("/.") != "":
        bare = bare[:-1] if bare.endswith("/") else bare[:-2]
    return bare, bare != path


class MemoryPowerShell:
    """``backend.powershell`` of the memory backend: the same runner, its own registrations
    (``.commands``), and PowerShell's message for an unknown command (exit code 1)."""

    def __init__(self, backend: InMemoryOperations, *, time_scale: float = 1.0) -> None:
        self._backend = backend
        self.commands = CommandRunner(backend, shell="powershell", time_scale=time_scale)

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
        return await self._backend._exec(
            self.commands, "powershell", command, cwd, on_data, signal, timeout, env
        )
