"""The tree walk shared by ``glob`` and ``search``, over callbacks, so every backend walks alike.

The walk is pure: it takes a callback that lists a directory and one that reads a small file
(the ignore files), both with paths relative to the walk root. The broker passes callbacks over
its confined directory fds, the memory backend over its tree. Rules: hidden entries are included,
``.gitignore`` / ``.ignore`` files are honoured (``_gitignore``), ``.git`` directories are
skipped, symlinks are reported but never followed, unreadable subdirectories are skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from ._errors import OpsError
from ._gitignore import ALWAYS_SKIPPED, IGNORE_FILES, NO_RULES, IgnoreRules
from ._glob import GlobMatcher, compile_glob, compile_globs
from ._types import FileKind

__all__ = ["ListDir", "ReadFile", "WalkEntry", "glob_paths", "join_rel", "read_quietly", "walk"]

ListDir = Callable[[str], Iterable[tuple[str, FileKind]]]
"""Lists the directory at a path relative to the walk root: ``(name, kind)`` pairs, links not
followed. May raise :class:`~operations.OpsError` (an unreadable directory is then skipped)."""

ReadFile = Callable[[str], bytes | None]
"""Reads the regular file at a path relative to the walk root; ``None`` (or an OpsError) if it
cannot (missing, not a regular file, unreadable)."""


@dataclass(frozen=True, slots=True)
class WalkEntry:
    """One entry found by :func:`walk`: its path relative to the walk root and its kind."""

    rel: str
    kind: FileKind


def join_rel(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


def read_quietly(read_file: ReadFile, rel: str) -> bytes | None:
    try:
        return read_file(rel)
    except OpsError:
        return None


def walk(
    list_dir: ListDir,
    read_file: ReadFile,
    *,
    ignore: Sequence[GlobMatcher] = (),
    respect_ignore_files: bool = True,
) -> Iterator[WalkEntry]:
    """Every entry below the walk root, depth first, names sorted by code point.

    A directory is yielded before its content. Ignored entries (ignore files, ``ignore``
    matchers, :data:`ALWAYS_SKIPPED`) are neither yielded nor entered. Errors listing the root
    propagate; errors listing a subdirectory skip it.
    """
    root_entries = sorted(list_dir(""))
    yield from _walk_dir(
        "", root_entries, NO_RULES, list_dir, read_file, ignore, respect_ignore_files
    )


def _walk_dir(
    rel_dir: str,
    entries: list[tuple[str, FileKind]],
    rules: IgnoreRules,
    list_dir: ListDir,
    read_file: ReadFile,
    ignore: Sequence[GlobMatcher],
    respect_ignore_files: bool,
) -> Iterator[WalkEntry]:
    if respect_ignore_files:
        names = {name: kind for name, kind in entries}
        for ignore_file in IGNORE_FILES:
            if names.get(ignore_file) is FileKind.FILE:
                content = read_quietly(read_file, join_rel(rel_dir, ignore_file))
                if content is not None:
                    rules = rules.with_file(rel_dir, content)
    for name, kind in entries:
        rel = join_rel(rel_dir, name)
        is_dir = kind is FileKind.DIRECTORY
        if is_dir and name in ALWAYS_SKIPPED:
            continue
        if rules.is_ignored(rel, is_dir):
            continue
        if any(matcher.match(rel) for matcher in ignore):
            continue
        yield WalkEntry(rel, kind)
        if is_dir:
            try:
                children = sorted(list_dir(rel))
            except OpsError:
                continue
            yield from _walk_dir(
                rel, children, rules, list_dir, read_file, ignore, respect_ignore_files
            )


def glob_paths(
    list_dir: ListDir,
    read_file: ReadFile,
    pattern: str,
    *,
    ignore: Sequence[str] = (),
    limit: int = 1000,
) -> list[str]:
    """The ``glob`` operation over a walk (rules: :mod:`operations._glob`).

    Raises:
        InvalidArgument: ``pattern`` or an ``ignore`` pattern is malformed.
    """
    matcher = compile_glob(pattern)
    ignore_matchers = compile_globs(ignore)
    if limit < 1:
        return []
    found = [
        entry.rel + "/" if entry.kind is FileKind.DIRECTORY else entry.rel
        for entry in walk(list_dir, read_file, ignore=ignore_matchers)
        if matcher.match(entry.rel)
    ]
    found.sort()
    return found[:limit]
