"""The tree walk shared by ``glob`` and ``search``, over callbacks, so every backend walks alike.

The walk is pure: it takes a callback that lists a directory and one that reads a small file
(the ignore files), both with paths relative to the walk root. The broker passes callbacks over
its confined directory fds, the memory backend over its tree. Rules: hidden entries are included,
``.gitignore`` / ``.ignore`` files are honoured (``_gitignore``), those of the directories above
the walk root too (the caller reads them with :func:`~operations._gitignore.parent_ignore_rules` and
passes them as ``inherited``), ``.git`` directories are skipped, symlinks are reported but never
followed, unreadable subdirectories are skipped.

A search engine that walks by itself (the broker's confined ``rg``, which cannot read above its
directory) applies the inherited rules afterwards with :class:`WalkReach`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from ._errors import OpsError
from ._gitignore import ALWAYS_SKIPPED, IGNORE_FILES, NO_RULES, IgnoreRules
from ._glob import GlobMatcher, compile_glob, compile_globs
from ._types import FileKind

__all__ = [
    "ListDir",
    "ReadFile",
    "WalkEntry",
    "WalkReach",
    "glob_paths",
    "join_rel",
    "read_quietly",
    "walk",
]

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
    inherited: IgnoreRules = NO_RULES,
) -> Iterator[WalkEntry]:
    """Every entry below the walk root, depth first, names sorted by code point.

    A directory is yielded before its content. Ignored entries (ignore files, the ``inherited``
    rules of the directories above, ``ignore`` matchers, :data:`ALWAYS_SKIPPED`) are neither
    yielded nor entered. Errors listing the root propagate; errors listing a subdirectory skip it.
    """
    root_entries = sorted(list_dir(""))
    rules = inherited if respect_ignore_files else NO_RULES
    yield from _walk_dir("", root_entries, rules, list_dir, read_file, ignore, respect_ignore_files)


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
        present = (f for f in IGNORE_FILES if names.get(f) is FileKind.FILE)
        rules = _with_files(rules, rel_dir, present, read_file)
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


def _with_files(
    rules: IgnoreRules, rel_dir: str, names: Iterable[str], read_file: ReadFile
) -> IgnoreRules:
    """``rules`` and the ignore files ``names`` of directory ``rel_dir``, in that order."""
    for name in names:
        content = read_quietly(read_file, join_rel(rel_dir, name))
        if content is not None:
            rules = rules.with_file(rel_dir, content)
    return rules


class WalkReach:
    """Whether :func:`walk` (with the same ``inherited`` rules) reaches a file: the ignore rules
    applied after the fact to the files another walker found.

    The ignore files of each directory are read once (a directory is remembered).
    """

    __slots__ = ("_dirs", "_read_file")

    def __init__(self, read_file: ReadFile, inherited: IgnoreRules) -> None:
        self._read_file = read_file
        self._dirs: dict[str, IgnoreRules | None] = {
            "": _with_files(inherited, "", IGNORE_FILES, read_file)
        }

    def reaches(self, rel: str) -> bool:
        """Whether the walk yields the file at ``rel`` (relative to the walk root)."""
        parent = rel.rpartition("/")[0]
        rules = self._rules_in(parent)
        return rules is not None and not rules.is_ignored(rel, False)

    def enters(self, rel_dir: str) -> bool:
        """Whether the walk enters the directory at ``rel_dir``."""
        return self._rules_in(rel_dir) is not None

    def _rules_in(self, rel_dir: str) -> IgnoreRules | None:
        """The rules in force inside ``rel_dir``, or ``None`` if the walk does not enter it."""
        if rel_dir in self._dirs:
            return self._dirs[rel_dir]
        parent, _, name = rel_dir.rpartition("/")
        above = self._rules_in(parent)
        rules = None
        if above is not None and name not in ALWAYS_SKIPPED and not above.is_ignored(rel_dir, True):
            rules = _with_files(above, rel_dir, IGNORE_FILES, self._read_file)
        self._dirs[rel_dir] = rules
        return rules


def glob_paths(
    list_dir: ListDir,
    read_file: ReadFile,
    pattern: str,
    *,
    ignore: Sequence[str] = (),
    limit: int = 1000,
    inherited: IgnoreRules = NO_RULES,
) -> list[str]:
    """The ``glob`` operation over a walk (rules: :mod:`operations._glob`); ``inherited``: the
    rules of the ignore files above the walk root (:func:`~operations._gitignore.parent_ignore_rules`).

    Raises:
        InvalidArgument: ``pattern`` or an ``ignore`` pattern is malformed.
    """
    matcher = compile_glob(pattern)
    ignore_matchers = compile_globs(ignore)
    if limit < 1:
        return []
    found = [
        entry.rel + "/" if entry.kind is FileKind.DIRECTORY else entry.rel
        for entry in walk(list_dir, read_file, ignore=ignore_matchers, inherited=inherited)
        if matcher.match(entry.rel)
    ]
    found.sort()
    return found[:limit]
