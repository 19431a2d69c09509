"""The rules of ``search`` (the grep tool's server side), pure, over the shared walk (``_walk``).

The broker (over its confined directory fds) and the memory backend (over its tree) pass their
own callbacks to :func:`search_tree`, so both search alike.

Search rules, the same on every backend:
    - **Dialect:** Python :mod:`re` (close to ripgrep's for everyday patterns: classes, groups,
      ``\\b``, ``\\d``, lazy quantifiers; no look-around differences matter to the tool).
      ``literal=True`` escapes the pattern; ``ignore_case=True`` is :data:`re.IGNORECASE`.
      A pattern that does not compile raises :class:`~operations.InvalidArgument` whose reason
      is ripgrep's ``regex parse error:`` block (:func:`regex_error_text`).
    - **Lines:** a leading UTF-8 byte-order mark is dropped (as rg's decoder does); a file is
      split on ``\\n``; one trailing ``\\r`` is dropped (CRLF files match
      ``$`` as expected); a last line without a terminator counts. ``line_text`` is the line
      without its terminator, or ``None`` when the line is not valid UTF-8 (it is still matched,
      with undecodable bytes standing for themselves). One match is one line.
    - **Binary files** (a NUL byte in the first :data:`BINARY_SNIFF_BYTES`) are skipped in a
      directory search; a file named directly is searched whatever its bytes (as ``rg`` does).
    - **Which files:** hidden files are searched (``rg --hidden``); ``.gitignore`` and ``.ignore``
      rules are respected (see ``_gitignore``), from the search directory down and in the
      directories above it up to the workspace root (``inherited``, never above it); ``.git``
      directories are skipped; symlinks are not followed (a link is neither searched nor entered);
      unreadable files and directories are skipped silently. ``glob`` filters files by the
      :mod:`operations._glob` dialect, matched against the path relative to the search directory;
      a leading ``!`` excludes instead. A path that names a file is searched whatever the ignore
      rules and ``glob`` say.
    - **Order:** depth first, the names in each directory sorted by code point (``rg --sort path``),
      lines in file order. **Limit:** at most ``limit`` matches (``limit`` below 1 gives none).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ._errors import InvalidArgument
from ._gitignore import NO_RULES, IgnoreRules
from ._glob import GlobMatcher, compile_glob
from ._types import FileKind, SearchMatch
from ._walk import ListDir, ReadFile, read_quietly, walk

__all__ = [
    "BINARY_SNIFF_BYTES",
    "FileFilter",
    "LineMatcher",
    "is_binary",
    "search_file",
    "search_tree",
]

BINARY_SNIFF_BYTES = 8192
"""How much of a file is looked at for a NUL byte (ripgrep's and git's heuristic)."""

UTF8_BOM = b"\xef\xbb\xbf"
"""Dropped from the start of a file before matching, as ripgrep's decoder drops it."""

_RG_MESSAGES = {
    "unterminated character set": "unclosed character class",
    "missing ), unterminated subpattern": "unclosed group",
    "unbalanced parenthesis": "unopened group",
    "nothing to repeat": "repetition operator missing expression",
    "multiple repeat": "repetition operator missing expression",
}
"""Python's description of a malformed pattern -> ripgrep's, where both mean the same."""


def regex_error_text(pattern: str, error: re.error) -> str:
    """ripgrep's message for a pattern that does not compile, as the reference shows it.

    The pattern is shown as rg shows it (inside ``(?:...)``) with a caret under the error.
    Where Python's description has no ripgrep twin it is kept, with a hint in the tool's JSON
    spelling.
    """
    described = _RG_MESSAGES.get(error.msg)
    position = 0 if described == "unclosed group" else 3 + (error.pos or 0)
    text = (
        f"rg: regex parse error:\n    (?:{pattern})\n    {' ' * position}^\n"
        f"error: {described or error.msg}"
    )
    if described is None:
        text += '\n(a Python regular expression; set "literal": true to search for the text)'
    return text


def is_binary(data: bytes) -> bool:
    """Whether ``data`` looks binary: a NUL byte in its first :data:`BINARY_SNIFF_BYTES`."""
    return b"\0" in data[:BINARY_SNIFF_BYTES]


class LineMatcher:
    """A compiled search pattern, applied line by line (see the module docstring)."""

    __slots__ = ("pattern", "regex")

    def __init__(self, pattern: str, *, ignore_case: bool = False, literal: bool = False) -> None:
        self.pattern = pattern
        source = re.escape(pattern) if literal else pattern
        flags = re.IGNORECASE if ignore_case else 0
        try:
            self.regex = re.compile(source, flags)
        except re.error as exc:
            raise InvalidArgument("search", None, regex_error_text(pattern, exc)) from None

    def iter_matches(self, data: bytes) -> Iterator[tuple[int, str | None]]:
        """``(line_number, line_text)`` for each matching line of ``data`` (numbers from 1)."""
        lines = data.removeprefix(UTF8_BOM).split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        for number, raw in enumerate(lines, start=1):
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            try:
                text: str | None = raw.decode("utf-8")
                subject = text
            except UnicodeDecodeError:
                text = None
                subject = raw.decode("utf-8", errors="surrogateescape")
            assert subject is not None
            if self.regex.search(subject) is not None:
                yield number, text


class FileFilter:
    """The ``glob`` option of ``search``: ``None`` keeps every file; ``!pattern`` excludes."""

    __slots__ = ("_exclude", "_matcher")

    def __init__(self, glob: str | None) -> None:
        self._exclude = False
        self._matcher: GlobMatcher | None = None
        if glob:
            if glob.startswith("!"):
                self._exclude = True
                glob = glob[1:]
            self._matcher = compile_glob(glob, op="search")

    def keeps(self, rel_path: str) -> bool:
        if self._matcher is None:
            return True
        return self._matcher.match(rel_path) != self._exclude


def search_file(matcher: LineMatcher, path: str, data: bytes) -> Iterator[SearchMatch]:
    """The matches in one file's content, binary or not (a file named directly is searched)."""
    for number, text in matcher.iter_matches(data):
        yield SearchMatch(path, number, text)


def search_tree(
    matcher: LineMatcher,
    root_path: str,
    list_dir: ListDir,
    read_file: ReadFile,
    *,
    glob: str | None = None,
    limit: int = 100,
    inherited: IgnoreRules = NO_RULES,
) -> Iterator[SearchMatch]:
    """Search every file below ``root_path`` (absolute; the callbacks take paths relative to it).

    Yields at most ``limit`` matches, in the documented order, as they are found. ``inherited``:
    the rules of the ignore files above ``root_path`` (:func:`~operations._gitignore.parent_ignore_rules`).
    """
    if limit < 1:
        return
    file_filter = FileFilter(glob)
    base = root_path.rstrip("/")
    count = 0
    for entry in walk(list_dir, read_file, inherited=inherited):
        if entry.kind is not FileKind.FILE or not file_filter.keeps(entry.rel):
            continue
        data = read_quietly(read_file, entry.rel)
        if data is None or is_binary(data):
            continue
        for match in search_file(matcher, f"{base}/{entry.rel}", data):
            yield match
            count += 1
            if count >= limit:
                return
