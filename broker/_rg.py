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
import os
import shutil
import sysconfig
from collections.abc import AsyncGenerator

from operations import SearchMatch
from operations._search import FileFilter, LineMatcher, is_binary

from . import _treewalk
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
    return rg_path() is not None and landlock_abi() >= 1


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
    ruleset = _ruleset(tree.fd, rg)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=f"/proc/self/fd/{tree.fd}",
            preexec_fn=ruleset.preexec,
            start_new_session=True,
            limit=MAX_LINE_BYTES,
        )
    finally:
        ruleset.close()
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
