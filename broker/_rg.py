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
    - ``--sort path``: the walk order of the Python search (names sorted per directory). That
      makes rg single-threaded, so a search runs several rg processes side by side (one per
      CPU that no other search holds, at most :data:`MAX_WORKERS`), each over a run of the search directory's entries (its
      subdirectories' entries where it has few) in walk order, handed to it as explicit paths;
      their outputs are read one after the other, so matches come in walk order and a reached
      limit still stops every one (:func:`_runs`). Explicit paths are not checked against
      ignore files, so the broker keeps out what the walk would not enter, and rg reads the
      ignore files of the entries' parents beneath the search directory.
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
import functools
import os
import shutil
import signal
import sysconfig
import threading
from collections.abc import AsyncGenerator

from operations import (
    FileFilter,
    IgnoreRules,
    LineMatcher,
    OpsError,
    SearchMatch,
    WalkReach,
    is_binary,
)

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
    "--no-ignore-global",
    "--no-ignore-exclude",
    "--no-messages",
    "--sort=path",
    "--text",
    "--crlf",
    "--glob=!.git/",
)
MAX_WORKERS = 8
"""rg processes one search runs at most, side by side."""
MAX_SPLIT_PATHS = 1024
"""Entries handed to the workers as explicit paths at most; a directory with more is searched by
one rg."""
MIN_SPLIT_FILES = 64
"""Entries below which a search with fewer than two directories per worker runs one rg."""
DIR_WEIGHT = 8
"""What a directory weighs against a file when entries are cut into runs of equal weight."""
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
    args = [rg, *RG_ARGS, *flags, "--regexp", matcher.pattern]
    keep = FileFilter(glob)
    inherited = tree.inherited_rules()
    reach = WalkReach(tree.read_small, inherited) if len(inherited) else None
    base = path.rstrip("/")
    checked: dict[bytes, bool] = {}
    count = 0
    yielded = False
    procs: list[_Rg] = []
    held = _take_workers()
    try:
        runs = None
        if held > 1:  # one worker needs no listing, and no thread for it
            runs = await _treewalk.glob_in_thread(tree, lambda: _runs(tree, inherited, held))
        if runs is None:
            argvs = [[*args, "--no-ignore-parent", "--", "./"]]
        else:
            argvs = [[*args, "--", *run] for run in runs]
        _give_workers(held - len(argvs))
        held = len(argvs)
        for argv in argvs:
            procs.append(await _start(argv, tree.fd, _ruleset(tree.fd, rg)))
        for proc in procs:
            proc.attach()  # read from now on; until then it waits once its pipe is full
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
                return
    finally:
        _give_workers(held)
        for proc in procs:  # every one stopped before the first wait, which a cancel can cut
            proc.close()
        for proc in procs:
            await proc.wait()


_held = [0]
"""rg workers that this process's searches hold: searches at once share the CPUs."""
_held_lock = threading.Lock()  # brokers may run on event loops in several threads


def _take_workers() -> int:
    """Workers for a new search (held until :func:`_give_workers`): the CPUs no other search
    holds, at least one, at most :data:`MAX_WORKERS`."""
    with _held_lock:
        count = max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0)) - _held[0]))
        _held[0] += count
    return count


def _give_workers(count: int) -> None:
    with _held_lock:
        _held[0] -= count


def _runs(
    tree: _treewalk.TreeAccess, inherited: IgnoreRules, workers: int
) -> list[list[str]] | None:
    """The entries of the search directory that the walk searches, as ``./`` paths in walk
    order, cut into one run per rg of ``workers`` (two or more): its subdirectories' entries
    instead where it has fewer than two per worker. ``None`` where one rg searches the
    directory: a small tree (fewer than two directories per worker and :data:`MIN_SPLIT_FILES`
    files), too many entries, an ``.rgignore`` (rg's alone) on the way, or a search directory
    inside one that the ruleset lets rg read (the system libraries), where rg would apply the
    ignore files above it."""
    if _under_readable_dir(tree.fd):
        return None
    reach = WalkReach(tree.read_small, inherited)
    units = _entries(tree, reach, "")
    if units is None:
        return None
    if len(units) < 2 * workers:  # few: name the directories' entries instead
        units = [
            child
            for unit in units
            for child in ((unit[1] and _entries(tree, reach, unit[0])) or [unit])
        ]
    dirs = sum(is_dir for _, is_dir in units)
    if len(units) > MAX_SPLIT_PATHS or (dirs < 2 * workers and len(units) < MIN_SPLIT_FILES):
        return None  # too many to name, or a small tree: one rg starts sooner than two
    share = sum(DIR_WEIGHT if is_dir else 1 for _, is_dir in units) / workers
    runs: list[list[str]] = [[]]
    load = 0
    for rel, is_dir in units:
        if load >= share * len(runs):
            runs.append([])
        runs[-1].append(f"./{rel}")
        load += DIR_WEIGHT if is_dir else 1
    return runs if len(runs) > 1 else None


def _entries(
    tree: _treewalk.TreeAccess, reach: WalkReach, rel: str
) -> list[tuple[str, bool]] | None:
    """The files and directories in directory ``rel`` that the walk reaches, sorted as rg sorts
    them (by bytes), each with whether it is a directory; ``None`` if there are more than
    :data:`MAX_SPLIT_PATHS`, or an ``.rgignore``, or the directory cannot be listed.

    rg follows a symlink and ignores no ignore rule when it is named on its command line: only
    what the walk itself enters is named (a link swapped in after this listing is seen by the
    Landlock ruleset and by the recheck of every reported file)."""
    found: list[tuple[str, bool]] = []
    try:
        fd = tree.open(rel, os.O_RDONLY | os.O_DIRECTORY)
    except OpsError:
        return None
    try:
        with os.scandir(fd) as listing:
            for entry in listing:
                if entry.name == ".rgignore" or len(found) >= MAX_SPLIT_PATHS:
                    return None
                if entry.is_dir(follow_symlinks=False):
                    found.append((entry.name, True))
                elif entry.is_file(follow_symlinks=False):
                    found.append((entry.name, False))
    except OSError:
        return None
    finally:
        os.close(fd)
    found.sort(key=lambda item: os.fsencode(item[0]))
    prefix = f"{rel}/" if rel else ""
    return [
        (prefix + name, is_dir)
        for name, is_dir in found
        if (reach.enters(prefix + name) if is_dir else reach.reaches(prefix + name))
    ]


def _under_readable_dir(fd: int) -> bool:
    """Whether the directory open at ``fd`` lies in one that the ruleset lets rg read."""
    try:
        where = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return True
    return any(os.path.commonpath((where, top)) == top for top in _readable_dirs())


@functools.cache
def _readable_dirs() -> tuple[str, ...]:
    return tuple(os.path.realpath(name) for name in SYSTEM_LIBRARY_DIRS)


class _Rg:
    """A running rg: its output streams, and a pidfd to kill and reap it by (never its pid,
    which names another process once rg is reaped)."""

    def __init__(self, pid: int, pidfd: int, pipes: tuple[int, int] = (-1, -1)) -> None:
        self.pid = pid
        self.stdout = asyncio.StreamReader(MAX_LINE_BYTES)
        self.stderr = asyncio.StreamReader(MAX_LINE_BYTES)
        self._pidfd = pidfd
        self._pipes = pipes  # the read ends of its stdout and stderr, until attached
        self._exit: asyncio.Future[int] | None = None
        self._transports: list[PipeReadTransport] = []

    def attach(self) -> None:
        """Read its two pipes into :attr:`stdout` and :attr:`stderr` from now on (until then
        rg waits once a pipe is full: a worker whose turn has not come holds little)."""
        pipes, self._pipes = self._pipes, (-1, -1)
        try:
            for fd, reader in zip(pipes, (self.stdout, self.stderr), strict=True):
                self._transports.append(PipeReadTransport(fd, reader))
        finally:
            for fd in pipes[len(self._transports) :]:
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

    def close(self) -> None:
        """Close the pipes and kill rg if it still runs (an early stop); its reaping goes on
        (:meth:`wait` for it: a cancelled wait leaves it going, so no zombie is left)."""
        for transport in self._transports:
            transport.close()
        pipes, self._pipes = self._pipes, (-1, -1)
        for fd in pipes:
            if fd >= 0:
                os.close(fd)
        if self._exit is None or not self._exit.done():  # the pidfd is open until rg is reaped
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        self._reaping()


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
    return _Rg(pid, pidfd, (out_r, err_r))


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
