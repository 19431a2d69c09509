"""The edit algorithm: match every replacement against the original text, then apply them at once.

Matching is exact first; when an ``oldText`` is only found after normalisation (NFKC, trailing
whitespace, typographic quotes, dashes and spaces), the whole edit works on the normalised text
and copies every untouched line back byte for byte. Each ``oldText`` must be unique (judged on the
normalised text) and the matches must not overlap; nothing is written unless every edit applies.

Also here: line-ending and BOM handling, and the two diffs the result carries (a numbered one
for display, a unified patch that applies with any standard ``patch``).
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "Edit",
    "EditError",
    "apply_edits",
    "detect_line_ending",
    "diff_lines",
    "generate_diff_string",
    "generate_unified_patch",
    "normalize_for_fuzzy_match",
    "normalize_to_lf",
    "restore_line_endings",
    "strip_bom",
]

BOM = "\ufeff"
DIFF_CONTEXT_LINES = 4  # lines of context around a change, in both diffs


class EditError(Exception):
    """An edit that cannot be applied; the message tells the model what to send instead."""


@dataclass(frozen=True, slots=True)
class Edit:
    old_text: str
    new_text: str


def strip_bom(text: str) -> tuple[str, str]:
    """Split a leading U+FEFF off ``text``: ``(bom, rest)``."""
    return (BOM, text[1:]) if text.startswith(BOM) else ("", text)


def detect_line_ending(text: str) -> str:
    """``"\\r\\n"`` if the first line ends with CRLF, else ``"\\n"``."""
    lf = text.find("\n")
    if lf < 0:
        return "\n"
    crlf = text.find("\r\n")
    return "\r\n" if 0 <= crlf < lf else "\n"


def normalize_to_lf(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def restore_line_endings(text: str, ending: str) -> str:
    return text.replace("\n", "\r\n") if ending == "\r\n" else text


# What JavaScript's trimEnd removes (WhiteSpace and LineTerminator), which is not str.isspace.
_JS_WHITESPACE = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_SINGLE_QUOTES = re.compile("[\u2018\u2019\u201a\u201b]")
_DOUBLE_QUOTES = re.compile("[\u201c\u201d\u201e\u201f]")
_DASHES = re.compile("[\u2010-\u2015\u2212]")
_SPACES = re.compile("[\u00a0\u2002-\u200a\u202f\u205f\u3000]")


def normalize_for_fuzzy_match(text: str) -> str:
    """NFKC, trailing whitespace off each line, typographic quotes, dashes and spaces to ASCII."""
    text = unicodedata.normalize("NFKC", text)
    text = "\n".join(line.rstrip(_JS_WHITESPACE) for line in text.split("\n"))
    text = _SINGLE_QUOTES.sub("'", text)
    text = _DOUBLE_QUOTES.sub('"', text)
    text = _DASHES.sub("-", text)
    return _SPACES.sub(" ", text)


def _find(content: str, old: str) -> tuple[int, int, bool]:
    """``(index, length, fuzzy)`` of ``old`` in ``content``; index -1 when absent."""
    index = content.find(old)
    if index >= 0:
        return index, len(old), False
    fuzzy_old = normalize_for_fuzzy_match(old)
    return normalize_for_fuzzy_match(content).find(fuzzy_old), len(fuzzy_old), True


def apply_edits(content: str, edits: Sequence[Edit], path: str) -> str:
    """Apply ``edits`` to the LF-normalised ``content``; return the new content.

    When a fuzzy match was needed, the lines the edits touch come from the normalised text (so
    they lose trailing whitespace and typographic characters); every other line is kept as is.

    Raises:
        EditError: an empty, missing, ambiguous or overlapping ``oldText``, or no change at all.
    """
    many = len(edits) > 1
    normalized = [Edit(normalize_to_lf(e.old_text), normalize_to_lf(e.new_text)) for e in edits]
    for i, edit in enumerate(normalized):
        if edit.old_text == "":
            where = f"edits[{i}].oldText" if many else "oldText"
            raise EditError(f"{where} must not be empty in {path}.")
    fuzzy = any(_find(content, e.old_text)[2] for e in normalized)
    base = normalize_for_fuzzy_match(content) if fuzzy else content
    fuzzy_base = normalize_for_fuzzy_match(base)
    matches: list[tuple[int, int, int, str]] = []  # (start, end, edit index, new text)
    for i, edit in enumerate(normalized):
        index, length, _ = _find(base, edit.old_text)
        if index < 0:
            if many:
                raise EditError(
                    f"Could not find edits[{i}] in {path}. The oldText must match exactly "
                    "including all whitespace and newlines."
                )
            raise EditError(
                f"Could not find the exact text in {path}. The old text must match exactly "
                "including all whitespace and newlines."
            )
        count = fuzzy_base.count(normalize_for_fuzzy_match(edit.old_text))
        if count > 1:
            if many:
                raise EditError(
                    f"Found {count} occurrences of edits[{i}] in {path}. Each oldText must be "
                    "unique. Please provide more context to make it unique."
                )
            raise EditError(
                f"Found {count} occurrences of the text in {path}. The text must be unique. "
                "Please provide more context to make it unique."
            )
        matches.append((index, index + length, i, edit.new_text))
    matches.sort(key=lambda m: m[0])
    for previous, following in itertools.pairwise(matches):
        if previous[1] > following[0]:
            raise EditError(
                f"edits[{previous[2]}] and edits[{following[2]}] overlap in {path}. "
                "Merge them into one edit or target disjoint regions."
            )
    new = _overlay(content, base, matches) if fuzzy else _replace(base, matches)
    if new == content:
        if many:
            raise EditError(
                f"No changes made to {path}. The replacements produced identical content."
            )
        raise EditError(
            f"No changes made to {path}. The replacement produced identical content. This might "
            "indicate an issue with special characters or the text not existing as expected."
        )
    return new


def _replace(text: str, matches: Sequence[tuple[int, int, int, str]]) -> str:
    for start, end, _, new_text in reversed(matches):
        text = text[:start] + new_text + text[end:]
    return text


def _overlay(original: str, base: str, matches: Sequence[tuple[int, int, int, str]]) -> str:
    """Apply ``matches`` (offsets in ``base``) line-wise, copying untouched lines from ``original``."""
    base_lines = _split_keep(base)
    original_lines = _split_keep(original)
    if len(original_lines) != len(base_lines):
        raise EditError(
            "Cannot preserve unchanged lines because the base content has a different line count."
        )
    starts = [0]
    for line in base_lines:
        starts.append(starts[-1] + len(line))

    def line_of(offset: int) -> int:
        lo, hi = 0, len(base_lines) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo

    groups: list[tuple[int, int, list[tuple[int, int, int, str]]]] = []
    for match in matches:
        first = line_of(match[0])
        last = line_of(max(match[0], match[1] - 1))
        if groups and first <= groups[-1][1]:
            g_first, g_last, members = groups[-1]
            groups[-1] = (g_first, max(g_last, last), [*members, match])
        else:
            groups.append((first, last, [match]))
    out: list[str] = []
    copied = 0
    for first, last, members in groups:
        out.extend(original_lines[copied:first])
        offset = starts[first]
        segment = base[offset : starts[last + 1]]
        shifted = [(s - offset, e - offset, i, t) for s, e, i, t in members]
        out.append(_replace(segment, shifted))
        copied = last + 1
    out.extend(original_lines[copied:])
    return "".join(out)


def _split_keep(text: str) -> list[str]:
    """Lines with their ``\\n`` kept (only ``\\n`` separates lines here)."""
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


# --- Line diff (Myers, as jsdiff's diffLines computes it) -------------------------------------


@dataclass(frozen=True, slots=True)
class DiffPart:
    """A run of lines: unchanged, ``added`` or ``removed``; ``lines`` keep their newlines."""

    lines: tuple[str, ...]
    added: bool = False
    removed: bool = False

    @property
    def value(self) -> str:
        return "".join(self.lines)


def diff_lines(old: str, new: str) -> list[DiffPart]:
    """A shortest line diff of ``old`` -> ``new``; in each change, removals come before additions."""
    a, b = _split_keep(old), _split_keep(new)
    ops = _myers(a, b)
    parts: list[DiffPart] = []
    i = j = 0
    run: list[tuple[str, str]] = []
    for op in ops:
        run.append((op, a[i] if op != "+" else b[j]))
        if op == "=":
            i += 1
            j += 1
        elif op == "-":
            i += 1
        else:
            j += 1
    # Group: consecutive "=", and change runs with removals first.
    k = 0
    while k < len(run):
        if run[k][0] == "=":
            start = k
            while k < len(run) and run[k][0] == "=":
                k += 1
            parts.append(DiffPart(tuple(t for _, t in run[start:k])))
            continue
        start = k
        while k < len(run) and run[k][0] != "=":
            k += 1
        removed = tuple(t for op, t in run[start:k] if op == "-")
        added = tuple(t for op, t in run[start:k] if op == "+")
        if removed:
            parts.append(DiffPart(removed, removed=True))
        if added:
            parts.append(DiffPart(added, added=True))
    return parts


def _myers(a: Sequence[str], b: Sequence[str]) -> list[str]:
    """Edit script (``=``, ``-``, ``+``) of the greedy O(ND) algorithm, deletions preferred."""
    n, m = len(a), len(b)
    vs: list[dict[int, int]] = []
    v: dict[int, int] = {1: 0}
    for d in range(n + m + 1):
        vs.append(dict(v))
        for k in range(-d, d + 1, 2):
            down = k == -d or (k != d and v[k - 1] < v[k + 1])
            x = v[k + 1] if down else v[k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            v[k] = x
            if x >= n and y >= m:
                return _backtrack(vs, v, a, b, d)
    return []


def _backtrack(
    vs: list[dict[int, int]], last: dict[int, int], a: Sequence[str], b: Sequence[str], d_end: int
) -> list[str]:
    x, y = len(a), len(b)
    script: list[str] = []
    for d in range(d_end, 0, -1):
        v = vs[d]
        k = x - y
        down = k == -d or (k != d and v[k - 1] < v[k + 1])
        prev_k = k + 1 if down else k - 1
        prev_x = v[prev_k]
        prev_y = prev_x - prev_k
        while x > prev_x and y > prev_y:
            script.append("=")
            x -= 1
            y -= 1
        script.append("+" if x == prev_x else "-")
        x, y = prev_x, prev_y
    while x > 0 and y > 0:
        script.append("=")
        x -= 1
        y -= 1
    script.reverse()
    return script


def generate_diff_string(
    old: str, new: str, context_lines: int = DIFF_CONTEXT_LINES
) -> tuple[str, int | None]:
    """The numbered diff shown to users: ``(diff, first changed line in the new file)``."""
    parts = diff_lines(old, new)
    width = len(str(max(len(old.split("\n")), len(new.split("\n")))))
    out: list[str] = []
    old_no = new_no = 1
    last_was_change = False
    first_changed: int | None = None
    elided = " " + " " * width + " ..."

    def context(lines: Sequence[str]) -> None:
        nonlocal old_no, new_no
        for text in lines:
            out.append(f" {old_no:>{width}} {text}")
            old_no += 1
            new_no += 1

    def skip(count: int) -> None:
        nonlocal old_no, new_no
        out.append(elided)
        old_no += count
        new_no += count

    for index, part in enumerate(parts):
        raw = part.value.split("\n")
        if raw[-1] == "":
            raw.pop()
        if part.added or part.removed:
            if first_changed is None:
                first_changed = new_no
            for text in raw:
                if part.added:
                    out.append(f"+{new_no:>{width}} {text}")
                    new_no += 1
                else:
                    out.append(f"-{old_no:>{width}} {text}")
                    old_no += 1
            last_was_change = True
            continue
        next_is_change = index + 1 < len(parts) and (
            parts[index + 1].added or parts[index + 1].removed
        )
        if last_was_change and next_is_change:
            if len(raw) <= 2 * context_lines:
                context(raw)
            else:
                context(raw[:context_lines])
                skip(len(raw) - 2 * context_lines)
                context(raw[-context_lines:])
        elif last_was_change:
            context(raw[:context_lines])
            if len(raw) > context_lines:
                skip(len(raw) - context_lines)
        elif next_is_change:
            hidden = max(0, len(raw) - context_lines)
            if hidden:
                skip(hidden)
            context(raw[hidden:])
        else:
            old_no += len(raw)
            new_no += len(raw)
        last_was_change = False
    return "\n".join(out), first_changed


def generate_unified_patch(
    path: str, old: str, new: str, context_lines: int = DIFF_CONTEXT_LINES
) -> str:
    """A two-file unified diff with headers ``--- <path>`` / ``+++ <path>``."""
    parts = [*diff_lines(old, new), DiffPart(())]
    hunks: list[str] = []
    hunk_lines: list[str] = []
    old_start = new_start = 0
    old_line = new_line = 1
    for index, part in enumerate(parts):
        lines = list(part.lines)
        if part.added or part.removed:
            if not old_start:
                old_start, new_start = old_line, new_line
                if index > 0:
                    previous = list(parts[index - 1].lines)
                    lead = previous[-context_lines:] if context_lines > 0 else []
                    hunk_lines = [" " + t for t in lead]
                    old_start -= len(lead)
                    new_start -= len(lead)
            sign = "+" if part.added else "-"
            hunk_lines.extend(sign + t for t in lines)
            if part.added:
                new_line += len(lines)
            else:
                old_line += len(lines)
            continue
        if old_start:
            if len(lines) <= 2 * context_lines and index < len(parts) - 2:
                hunk_lines.extend(" " + t for t in lines)
            else:
                size = min(len(lines), context_lines)
                hunk_lines.extend(" " + t for t in lines[:size])
                old_count = old_line - old_start + size
                new_count = new_line - new_start + size
                hunks.append(
                    _format_hunk(
                        old_start - (1 if old_count == 0 else 0),
                        old_count,
                        new_start - (1 if new_count == 0 else 0),
                        new_count,
                        hunk_lines,
                    )
                )
                old_start = new_start = 0
                hunk_lines = []
        old_line += len(lines)
        new_line += len(lines)
    return "\n".join([f"--- {path}", f"+++ {path}", *hunks]) + "\n"


def _format_hunk(
    old_start: int, old_count: int, new_start: int, new_count: int, lines: list[str]
) -> str:
    out = [f"@@ -{old_start},{old_count} +{new_start},{new_count} @@"]
    for line in lines:
        if line.endswith("\n"):
            out.append(line[:-1])
        else:
            out.append(line)
            out.append("\\ No newline at end of file")
    return "\n".join(out)
