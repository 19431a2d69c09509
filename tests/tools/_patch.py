"""A strict unified-patch applier for tests: proves a generated patch round-trips."""

from __future__ import annotations

import re

_HUNK = re.compile(r"^@@ -(\d+),(\d+) \+(\d+),(\d+) @@$")


def apply_patch(original: str, patch: str) -> str:
    """Apply ``patch`` to ``original``; raise AssertionError when a context line disagrees."""
    old = re.findall(r"[^\n]*\n|[^\n]+$", original)
    lines = patch.split("\n")
    assert lines[0].startswith("--- ") and lines[1].startswith("+++ ")
    out: list[str] = []
    cursor = 0
    i = 2
    while i < len(lines) and lines[i]:
        m = _HUNK.match(lines[i])
        assert m, lines[i]
        start = int(m.group(1)) - (0 if int(m.group(2)) == 0 else 1)
        out.extend(old[cursor:start])
        cursor = start
        i += 1
        while i < len(lines) and lines[i] and not lines[i].startswith("@@"):
            tag, text = lines[i][0], lines[i][1:]
            no_newline = i + 1 < len(lines) and lines[i + 1].startswith("\\ ")
            full = text if no_newline else text + "\n"
            if tag in " -":
                assert old[cursor] == full, (old[cursor], full)
                cursor += 1
            if tag in " +":
                out.append(full)
            i += 2 if no_newline else 1
    out.extend(old[cursor:])
    return "".join(out)
