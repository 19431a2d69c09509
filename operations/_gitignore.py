"""``.gitignore`` rules as ripgrep and fd apply them, as a pure object fed file contents.

A walker (on disk in the broker, over the memory backend's tree) starts from the rules its
directory inherits (:func:`parent_ignore_rules`: the ignore files of the directories above it, up to the
workspace root and never beyond, as ripgrep and fd read them) and, on entering each directory, calls :meth:`IgnoreRules.with_file` for the ignore files found
there (:data:`IGNORE_FILES`, in that order). It then asks :meth:`IgnoreRules.is_ignored` for
each entry and does not descend into ignored directories, which is also why a file inside an
ignored directory can never be re-included (as in git).

Rules (gitignore(5)):
    - blank lines and lines starting with ``#`` are skipped; trailing spaces are dropped unless
      escaped (``\\ ``); ``\\#`` and ``\\!`` start a pattern with a literal ``#`` / ``!``;
    - ``!pattern`` re-includes what an earlier rule ignored;
    - a trailing ``/`` makes a rule match directories only;
    - a pattern with a ``/`` at the start or in the middle is anchored to the directory of its
      file; without one it matches a name at any depth below that directory;
    - ``*``, ``?``, ``[...]`` and ``**`` as in :mod:`operations._glob`;
    - the last matching rule wins; deeper files come later than shallower ones, and ``.ignore``
      comes after ``.gitignore`` in the same directory (so it overrides it, as in ripgrep);
      the files of the parents come first, the root's before its children's.

Unlike ripgrep, the rules apply whether or not the tree is a git repository (fd's
``--no-require-git``, which the reference find tool uses outside a repository): the same tree
gives the same results everywhere. ``.git`` directories are always skipped by the walker
(:data:`ALWAYS_SKIPPED`), hidden or not.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ._errors import InvalidArgument, OpsError
from ._glob import translate_glob

__all__ = ["ALWAYS_SKIPPED", "IGNORE_FILES", "NO_RULES", "IgnoreRules", "parent_ignore_rules"]

IGNORE_FILES: tuple[str, ...] = (".gitignore", ".ignore")
"""Ignore files read in each directory, lowest precedence first."""

ALWAYS_SKIPPED: frozenset[str] = frozenset({".git"})
"""Directory names a walker never enters nor reports."""


@dataclass(frozen=True, slots=True)
class _Rule:
    base: str
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool
    anchored: bool
    above: str = ""  # a parent's rule: the path from its directory down to the walk root

    def matches(self, rel_path: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        if self.above:
            rel_path = f"{self.above}/{rel_path}"
        if self.base:
            if not rel_path.startswith(self.base + "/"):
                return False
            rel_path = rel_path[len(self.base) + 1 :]
        if not self.anchored:
            rel_path = rel_path.rsplit("/", 1)[-1]
        return self.regex.fullmatch(rel_path) is not None


def _strip_trailing_spaces(line: str) -> str:
    end = len(line)
    while end > 0 and line[end - 1] == " ":
        if end >= 2 and line[end - 2] == "\\":
            break
        end -= 1
    return line[:end]


def _parse_line(base: str, line: str) -> _Rule | None:
    line = _strip_trailing_spaces(line.rstrip("\r"))
    if not line or line.startswith("#"):
        return None
    negate = False
    if line.startswith("!"):
        negate = True
        line = line[1:]
    elif line.startswith(("\\!", "\\#")):
        line = line[1:]
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    anchored = "/" in line
    line = line.lstrip("/")
    if line.endswith("\\ "):
        line = line[:-2] + " "
    try:
        regex = re.compile(translate_glob(line, op="gitignore"), re.DOTALL)
    except InvalidArgument:
        return None  # git skips a malformed line; so do we
    return _Rule(base, regex, negate, dir_only, anchored)


class IgnoreRules:
    """An immutable stack of ignore rules; :meth:`with_file` returns a new, longer stack."""

    __slots__ = ("_rules",)

    def __init__(self, rules: tuple[_Rule, ...] = ()) -> None:
        self._rules = rules

    def with_file(self, base_dir: str, content: bytes) -> IgnoreRules:
        """Add the rules of an ignore file found in ``base_dir`` (relative to the walk root,
        ``""`` for the root itself)."""
        text = content.decode("utf-8", errors="replace")
        base = base_dir.strip("/")
        parsed = (_parse_line(base, line) for line in text.split("\n"))
        added = tuple(rule for rule in parsed if rule is not None)
        if not added:
            return self
        return IgnoreRules(self._rules + added)

    def with_parent_file(self, below: str, content: bytes) -> IgnoreRules:
        """Add the rules of an ignore file found above the walk root; ``below`` is the path from
        its directory down to the walk root (``"sub"`` for ``w/.gitignore`` in a walk of
        ``w/sub``), so its anchored patterns keep their meaning."""
        rules = self.with_file("", content)._rules[len(self._rules) :]
        above = below.strip("/")
        return IgnoreRules(self._rules + tuple(_with_above(rule, above) for rule in rules))

    def is_ignored(self, rel_path: str, is_dir: bool) -> bool:
        """Whether the entry at ``rel_path`` (relative to the walk root) is ignored.

        Only the entry's own name and path are checked; the walker checks ancestors by not
        descending into ignored directories.
        """
        for rule in reversed(self._rules):
            if rule.matches(rel_path, is_dir):
                return not rule.negate
        return False

    def __len__(self) -> int:
        return len(self._rules)


def _with_above(rule: _Rule, above: str) -> _Rule:
    return _Rule(rule.base, rule.regex, rule.negate, rule.dir_only, rule.anchored, above)


NO_RULES = IgnoreRules()
"""The empty stack: no ignore file applies."""


def parent_ignore_rules(rel_dir: str, read_file: Callable[[str], bytes | None]) -> IgnoreRules:
    """The rules a walk of ``rel_dir`` (relative to the workspace root) inherits from above it.

    These are the :data:`IGNORE_FILES` of every directory from the workspace root down to the
    parent of ``rel_dir``, read with ``read_file`` (which takes root-relative paths and returns
    ``None``, or raises an OpsError, for a file it cannot read). Nothing above the workspace root
    is ever read: ripgrep would go up to the repository root, but what lies above the root is not
    the workspace's (and may not be the broker's to read). For the root itself: :data:`NO_RULES`.
    """
    parts = [part for part in rel_dir.split("/") if part and part != "."]
    if ".." in parts:
        raise ValueError(f"parent_ignore_rules needs a resolved path, not {rel_dir!r}")
    rules = NO_RULES
    for depth in range(len(parts)):
        below = "/".join(parts[depth:])
        for name in IGNORE_FILES:
            try:
                content = read_file("/".join([*parts[:depth], name]))
            except OpsError:
                content = None
            if content is not None:
                rules = rules.with_parent_file(below, content)
    return rules
