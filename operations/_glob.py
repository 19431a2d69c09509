"""The glob dialect of ``glob`` (the find tool) and of the ``glob`` filter of ``search``.

Every backend uses these rules, so a pattern finds the same files on every backend. They follow
``fd --glob --hidden`` as the reference find tool runs it (reference pi-tools.md section 2.8):

Syntax (paths are ``/``-separated and relative to the search directory):
    ``*``       any run of characters except ``/``
    ``?``       one character except ``/``
    ``[abc]``   one character of the set; ``[a-z]`` ranges; ``[!a]`` or ``[^a]`` negates
    ``**``      as a whole path component: zero or more components (``a/**`` also matches ``a``);
                elsewhere it behaves like ``*``
    ``{a,b}``   alternatives (nesting allowed)
    ``\\x``     the character ``x`` literally

Where a pattern applies:
    - without ``/``: it matches the **name** of an entry at any depth (``*.py`` finds ``a/b/c.py``);
    - with ``/``: it matches the **whole relative path** (``src/*.py`` finds ``src/a.py`` only, and
      ``**/test/*.py`` finds ``test/x.py`` at any depth); a leading ``/`` anchors to the search
      directory and is dropped.

What ``glob`` reports (see :func:`operations._search.walk` for the walk itself):
    - files, directories and symlinks; hidden entries are included;
    - directories with a trailing ``/`` (``src/``), as fd prints them; symlinks are never followed,
      so a link to a directory is reported without the slash and not descended;
    - entries ignored by ``.gitignore`` / ``.ignore`` files are skipped (see ``_gitignore``), and
      ``.git`` directories always are;
    - an ``ignore`` pattern (same dialect, e.g. ``**/node_modules/**``) removes what it matches,
      and a directory it matches is not descended;
    - results are sorted by code point, then cut to ``limit`` (a ``limit`` below 1 gives nothing),
      so every backend returns the same list.

An invalid pattern (an unclosed ``[`` or ``{``) raises :class:`~operations.InvalidArgument` whose
message contains ``error parsing glob``, as fd's does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ._errors import InvalidArgument

__all__ = ["GlobMatcher", "compile_glob", "compile_globs", "translate_glob"]


def _error(pattern: str, op: str, why: str) -> InvalidArgument:
    return InvalidArgument(op, None, f"error parsing glob {pattern!r}: {why}")


def _split_braces(body: str) -> list[str]:
    """Split the inside of ``{...}`` on top-level commas."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            current.append(body[i : i + 2])
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
            i += 1
            continue
        current.append(ch)
        i += 1
    parts.append("".join(current))
    return parts


def _translate_class(pattern: str, i: int, op: str) -> tuple[str, int]:
    """Translate the ``[...]`` starting at ``pattern[i]``; return (regex, index after it)."""
    j = i + 1
    negate = False
    if j < len(pattern) and pattern[j] in "!^":
        negate = True
        j += 1
    items: list[str] = []
    first = True
    while True:
        if j >= len(pattern):
            raise _error(pattern, op, "unclosed character class; missing ']'")
        ch = pattern[j]
        if ch == "]" and not first:
            j += 1
            break
        first = False
        if ch == "\\" and j + 1 < len(pattern):
            ch = pattern[j + 1]
            j += 1
        if j + 2 < len(pattern) and pattern[j + 1] == "-" and pattern[j + 2] != "]":
            end = pattern[j + 2]
            if end < ch:
                raise _error(pattern, op, f"invalid range {ch}-{end}")
            items.append(f"{re.escape(ch)}-{re.escape(end)}")
            j += 3
            continue
        items.append(re.escape(ch))
        j += 1
    body = "".join(items)
    # A class never matches the separator, negated or not.
    return (f"[^/{body}]" if negate else f"(?!/)[{body}]"), j


def _translate(pattern: str, op: str) -> str:
    out: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "*":
            if pattern.startswith("**", i):
                start_ok = i == 0 or pattern[i - 1] == "/"
                end = i + 2
                while end < n and pattern[end] == "*":
                    end += 1
                if start_ok and end == n:
                    # "a/**" matches "a" too: the slash before it becomes optional.
                    if out and out[-1] == "/":
                        out[-1] = "(?:/.*)?"
                    else:
                        out.append(".*")
                    i = end
                    continue
                if start_ok and pattern[end] == "/":
                    out.append("(?:[^/]*/)*")
                    i = end + 1
                    continue
                out.append("[^/]*")
                i = end
                continue
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            regex, i = _translate_class(pattern, i, op)
            out.append(regex)
            continue
        elif ch == "{":
            depth = 0
            j = i
            while j < n:
                if pattern[j] == "\\":
                    j += 2
                    continue
                if pattern[j] == "{":
                    depth += 1
                elif pattern[j] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            if j >= n:
                raise _error(pattern, op, "unclosed alternate group; missing '}'")
            alternatives = [_translate(alt, op) for alt in _split_braces(pattern[i + 1 : j])]
            out.append("(?:" + "|".join(alternatives) + ")")
            i = j + 1
            continue
        elif ch == "}":
            raise _error(pattern, op, "unopened alternate group; missing '{'")
        elif ch == "\\":
            if i + 1 >= n:
                raise _error(pattern, op, "dangling '\\'")
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        elif ch == "/":
            out.append("/")
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def translate_glob(pattern: str, *, op: str = "glob") -> str:
    """The regex (without anchors) matching exactly the paths ``pattern`` matches."""
    return _translate(pattern, op)


@dataclass(frozen=True, slots=True)
class GlobMatcher:
    """A compiled glob: :meth:`match` takes a ``/``-separated path relative to the search root."""

    pattern: str
    regex: re.Pattern[str]
    basename_only: bool

    def match(self, rel_path: str) -> bool:
        rel_path = rel_path.rstrip("/")
        if self.basename_only:
            rel_path = rel_path.rsplit("/", 1)[-1]
        return self.regex.fullmatch(rel_path) is not None


def compile_glob(pattern: str, *, op: str = "glob") -> GlobMatcher:
    """Compile ``pattern`` (see the module docstring for the rules).

    Raises:
        InvalidArgument: the pattern is empty or malformed ("error parsing glob ...").
    """
    if pattern == "":
        raise _error(pattern, op, "empty pattern")
    if "\0" in pattern:
        raise _error(pattern, op, "NUL byte in pattern")
    basename_only = "/" not in pattern
    body = pattern.lstrip("/") if not basename_only else pattern
    if body == "":
        body = "**"
    return GlobMatcher(pattern, re.compile(_translate(body, op), re.DOTALL), basename_only)


def compile_globs(patterns: Sequence[str], *, op: str = "glob") -> list[GlobMatcher]:
    """Compile several patterns (e.g. ``ignore=``), failing on the first malformed one."""
    return [compile_glob(p, op=op) for p in patterns]
