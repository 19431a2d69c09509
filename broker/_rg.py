"""Fast confined search: the ``rg`` binary (``ripgrep`` wheel) under a Landlock read-only ruleset.

``rg`` opens files by path, so on its own a directory swapped for a symlink mid-search could make
it read outside the root. It therefore runs only where it can be kept inside: in its own process,
whose working directory is the search directory opened beneath the root (``/proc/self/fd/N``),
under a Landlock ruleset (Linux >= 5.13) that lets it read only beneath that directory, plus
execute its own binary and the system libraries it links. Where Landlock is missing the broker
searches with the fd-based Python walk (``_treewalk``), which gives the same results.

Rules (kept equal to ``operations._search`` on the conformance suite):
    - ``--hidden --no-follow``; ``.gitignore`` / ``.ignore`` honoured in and below the search
      directory by rg, repository or not (``--no-require-git --no-ignore-parent
      --no-ignore-global --no-ignore-exclude``); ``.git`` directories skipped; ``--no-config``.
    - The ignore files of the directories between the root and the search directory, which rg
      cannot read (nor should: it would go on above the root), are read by the broker
      (``TreeAccess.inherited_rules``) and applied to what rg reports (``operations.WalkReach``):
      a file is kept only if the Python walk, with those rules, would reach it.
    - ``--sort path``: the walk order of the Python search (names sorted per directory).
    - ``--text --crlf``: every file is read as text by rg; the broker then drops files with a NUL
      in their first 8 KiB (the shared binary rule), and ``$`` matches before ``\\r\\n``.
    - The ``glob`` filter is applied by the broker (the shared glob dialect), not by rg.
    - Every reported file is re-checked: opened beneath the search directory with no symlink
      followed, it must be a regular file; otherwise its matches are dropped.
    - Dialect: Rust ``regex`` for rg, Python ``re`` for the walk. The pattern is first compiled
      with ``re`` (a pattern it rejects is :class:`~operations.InvalidArgument` everywhere);
      a pattern rg rejects (look-around, backreferences, ``\\Z``) is searched by the Python walk.
      They differ on: POSIX classes ``[[:alpha:]]`` (rg only), ``\\h`` (rg only), Unicode case
      folding details, and lines that are not valid UTF-8 (rg matches bytes, Python matches the
      surrogate-escaped text); ``.rgignore`` files are honoured by rg only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sysconfig
from collections.abc import AsyncGenerator

from operations import FileFilter, LineMatcher, SearchMatch, WalkReach, is_binary

from . import _treewalk
from ._pipe import PipeReadTransport
from ._process import readable

try:
    from . import _spawn
except ImportError:  # not built: search uses the Python walk
    _spawn = None  # type: ignore[assignment]
from ._landlock import (
    ACCESS_FS_READ_DIR,
    ACCESS_FS_READ_FILE,
    READ,
    Rule,
    Ruleset,
    landlock_abi,
)

__all__ = ["landlock_abi", "rg_path", "search", "usable"]

RG_ARGS = (
    "--no-config",
    "--null",
    "--line-number",
    "--no-heading",
    "--with-filename",
    "--color=never",
    "--hidden",
    "--no-follow",
    "--no-require-git",
    "--no-ignore-parent",
    "--no-ignore-global",
    "--no-ignore-exclude",
    "--no-messages",
    "--sort=path",
    "--text",
    "--crlf",
    "--glob=!.git/",
)
MAX_LINE_BYTES = 16 * 1024 * 1024  # one output line of rg (a matching line) at most
SYSTEM_LIBRARY_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/etc/ld.so.cache")
"""What the dynamic loader needs to start rg (read and execute, nothing else)."""


def rg_path() -> str | None:
    """The ``rg`` from the ``ripgrep`` wheel beside this interpreter, else the one on ``PATH``."""
    beside = os.path.join(sysconfig.get_path("scripts"), "rg")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("rg")


def usable() -> bool:
    """Whether rg can be used and confined here."""
    return _spawn is not None and rg_path() is not None and landlock_abi() >= 1


def _ruleset(search_fd: int, rg: str) -> Ruleset:
    """Landlock rules for one rg run: read beneath the search directory (named through its fd,
    never by path), read and execute rg and the loader's libraries; nothing else. With ABI >= 6
    rg also cannot signal the broker."""
    rules = [Rule(f"/proc/self/fd/{search_fd}", ACCESS_FS_READ_FILE | ACCESS_FS_READ_DIR)]
    rules += [Rule(path, READ) for path in (rg, *SYSTEM_LIBRARY_DIRS)]
    return Ruleset(rules)


async def search(
    tree: _treewalk.TreeAccess,
    matcher: LineMatcher,
    path: str,
    *,
    glob: str | None,
    limit: int,
    ignore_case: bool,
    literal: bool,
) -> AsyncGenerator[SearchMatch, None]:
    """Search the tree with confined rg; falls back to the Python walk if rg rejects the pattern."""
    rg = rg_path()
    assert rg is not None
    flags = ["--fixed-strings"] if literal else []
    if ignore_case:
        flags.append("--ignore-case")
    argv = [rg, *RG_ARGS, *flags, "--regexp", matcher.pattern, "--", "./"]
    keep = FileFilter(glob)
    inherited = tree.inherited_rules()
    reach = WalkReach(tree.read_small, inherited) if len(inherited) else None
    proc = await _start(argv, tree.fd, _ruleset(tree.fd, rg))
    base = path.rstrip("/")
    checked: dict[bytes, bool] = {}
    count = 0
    yielded = False
    try:
        async for line in proc.stdout:
            name, sep, rest = line.partition(b"\0")
            number, sep2, text = rest.partition(b":")
            if not sep or not sep2:
                continue
            if name.startswith(b"./"):
                name = name[2:]
            ok = checked.get(name)
            if ok is None:
                ok = checked[name] = _recheck(tree, keep, reach, name)
            if not ok:
                continue
            yielded = True
            yield SearchMatch(f"{base}/{os.fsdecode(name)}", int(number), _line_text(text))
            count += 1
            if count >= limit:
                return
        errors = await proc.stderr.read()
        if await proc.wait() == 2 and not yielded and b"regex" in errors:
            fallback = _treewalk.search(tree, matcher, path, glob=glob, limit=limit)
            async with contextlib.aclosing(fallback) as matches:
                async for match in matches:
                    yield match
    finally:
        await proc.aclose()


class _Rg:
    """A running rg: its output streams, and a pidfd to kill and reap it by (never its pid,
    which names another process once rg is reaped)."""

    def __init__(self, pid: int, pidfd: int) -> None:
        self.pid = pid
        self.stdout = asyncio.StreamReader(MAX_LINE_BYTES)
        self.stderr = asyncio.StreamReader(MAX_LINE_BYTES)
        self._pidfd = pidfd
        self._exit: asyncio.Future[int] | None = None
        self._transports: list[PipeReadTransport] = []

    def attach(self, stdout_fd: int, stderr_fd: int) -> None:
        """Read the two pipes into :attr:`stdout` and :attr:`stderr` (taking the fds)."""
        try:
            for fd, reader in ((stdout_fd, self.stdout), (stderr_fd, self.stderr)):
                self._transports.append(PipeReadTransport(fd, reader))
        finally:
            for fd in (stdout_fd, stderr_fd)[len(self._transports) :]:
                os.close(fd)

    def _reaping(self) -> asyncio.Future[int]:
        """rg's exit code once it is reaped: one reaping, which every caller awaits and a
        cancelled caller leaves going."""
        if self._exit is None:
            self._exit = asyncio.ensure_future(self._reap())
        return self._exit

    async def _reap(self) -> int:
        try:
            await readable(self._pidfd)  # rg has exited
            _, status = os.waitpid(self.pid, 0)  # noqa: ASYNC222 (a zombie: never blocks)
        finally:
            os.close(self._pidfd)
        return os.waitstatus_to_exitcode(status)

    async def wait(self) -> int:
        return await asyncio.shield(self._reaping())

    async def aclose(self) -> None:
        """Close the pipes, kill rg if it still runs (an early stop) and reap it.

        **Cancellation:** the reaping goes on (shielded), so no zombie is left.
        """
        for transport in self._transports:
            transport.close()
        if self._exit is None or not self._exit.done():  # the pidfd is open until rg is reaped
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        await self.wait()


async def _start(argv: list[str], cwd_fd: int, ruleset: Ruleset) -> _Rg:
    """Start rg in ``cwd_fd`` and a new domain of ``ruleset`` (entered between fork and exec by
    the native spawner: no Python runs in the child), with an empty environment."""
    assert _spawn is not None  # usable() checked it
    fds: list[int] = []
    try:
        out_r, out_w = os.pipe()
        fds += (out_r, out_w)
        err_r, err_w = os.pipe()
        fds += (err_r, err_w)
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        fds.append(null)
        ruleset_fd, no_new_privs = ruleset.entry()
        pid = _spawn.spawn(
            [os.fsencode(argv[0])],
            [os.fsencode(arg) for arg in argv],
            [],
            stdin_fd=null,
            stdout_fd=out_w,
            stderr_fd=err_w,
            cwd_fd=cwd_fd,
            ruleset_fd=ruleset_fd,
            no_new_privs=no_new_privs,
        )
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    finally:
        ruleset.close()
    for fd in (out_w, err_w, null):
        os.close(fd)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        os.kill(pid, signal.SIGKILL)  # not reaped: the pid is still rg's
        await asyncio.to_thread(os.waitpid, pid, 0)
        for fd in (out_r, err_r):
            os.close(fd)
        raise
    proc = _Rg(pid, pidfd)
    try:
        proc.attach(out_r, err_r)
    except BaseException:
        await proc.aclose()
        raise
    return proc


def _recheck(
    tree: _treewalk.TreeAccess, keep: FileFilter, reach: WalkReach | None, name: bytes
) -> bool:
    rel = os.fsdecode(name)
    if not keep.keeps(rel) or (reach is not None and not reach.reaches(rel)):
        return False
    head = tree.head(rel)
    return head is not None and not is_binary(head)


def _line_text(raw: bytes) -> str | None:
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
