"""Fast confined search: the ``rg`` binary (``ripgrep`` wheel) under a Landlock read-only ruleset.

``rg`` opens files by path, so on its own a directory swapped for a symlink mid-search could make
it read outside the root. It therefore runs only where it can be kept inside: in its own process,
whose working directory is the search directory opened beneath the root (``/proc/self/fd/N``),
under a Landlock ruleset (Linux >= 5.13) that lets it read only beneath that directory, plus
execute its own binary and the system libraries it links. Where Landlock is missing the broker
searches with the fd-based Python walk (``_treewalk``), which gives the same results.

Rules (kept equal to ``operations._search`` on the conformance suite):
    - ``--hidden --no-follow``; ``.gitignore`` / ``.ignore`` honoured in and below the search
      directory only, repository or not (``--no-require-git --no-ignore-parent
      --no-ignore-global --no-ignore-exclude``); ``.git`` directories skipped; ``--no-config``.
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
import ctypes
import os
import shutil
import stat
import sys
import sysconfig
from collections.abc import AsyncGenerator, Callable

from operations import SearchMatch
from operations._search import FileFilter, LineMatcher, is_binary

from . import _treewalk

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

# Landlock uapi (linux/landlock.h)
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_EXECUTE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 2, 1 << 3
_FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1}
_FS_RIGHTS_LATEST = (1 << 16) - 1  # ABI 5 added LANDLOCK_ACCESS_FS_IOCTL_DEV


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


_libc = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
_abi: int | None = None


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is missing or disabled."""
    global _abi
    if _abi is None:
        _abi = 0
        if _libc is not None:
            version = _libc.syscall(
                _SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1)
            )
            _abi = max(int(version), 0)
    return _abi


def rg_path() -> str | None:
    """The ``rg`` from the ``ripgrep`` wheel beside this interpreter, else the one on ``PATH``."""
    beside = os.path.join(sysconfig.get_path("scripts"), "rg")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("rg")


def usable() -> bool:
    """Whether rg can be used and confined here."""
    return rg_path() is not None and landlock_abi() >= 1


def _sandbox(read_fd: int, exec_fds: list[tuple[int, int]]) -> Callable[[], None]:
    """A ``preexec_fn``: in the child, allow only reads beneath ``read_fd`` and executing rg."""
    assert _libc is not None
    libc = _libc
    rights = _FS_RIGHTS_BY_ABI.get(landlock_abi(), _FS_RIGHTS_LATEST)
    handled = ctypes.c_uint64(rights)

    def apply() -> None:
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        ruleset = libc.syscall(
            _SYS_CREATE_RULESET, ctypes.byref(handled), ctypes.c_size_t(8), ctypes.c_uint32(0)
        )
        if ruleset < 0:
            raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
        for fd, allowed in [(read_fd, _READ_FILE | _READ_DIR), *exec_fds]:
            attr = _PathBeneath(allowed & rights, fd)
            if libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(attr), 0):
                raise OSError(ctypes.get_errno(), "landlock_add_rule")
        if libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
        os.close(ruleset)

    return apply


def _open_exec_paths(rg: str) -> list[tuple[int, int]]:
    """``(O_PATH fd, rights)`` for rg and the loader's directories; opened in the parent."""
    found = []
    for path in (rg, *SYSTEM_LIBRARY_DIRS):
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
            # Directory rights (READ_DIR) may only be granted on a directory.
            found.append((fd, _READ_FILE | _EXECUTE | (_READ_DIR if is_dir else 0)))
    return found


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
    exec_fds = _open_exec_paths(rg)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=f"/proc/self/fd/{tree.fd}",
            preexec_fn=_sandbox(tree.fd, exec_fds),
            start_new_session=True,
            limit=MAX_LINE_BYTES,
        )
    finally:
        for fd, _ in exec_fds:
            os.close(fd)
    base = path.rstrip("/")
    keep = FileFilter(glob)
    checked: dict[bytes, bool] = {}
    count = 0
    yielded = False
    assert proc.stdout is not None and proc.stderr is not None
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
                ok = checked[name] = _recheck(tree, keep, name)
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
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


def _recheck(tree: _treewalk.TreeAccess, keep: FileFilter, name: bytes) -> bool:
    rel = os.fsdecode(name)
    if not keep.keeps(rel):
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
