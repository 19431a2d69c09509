"""The shell scripts never read a file that a background job has yet to create.

``cmd > out &`` opens ``out`` in the forked child, so the script's next line may run first: the
demo's ready loop once failed with ``sed: can't read .../serve.out``. Every file a background
job writes must be created (``: > FILE``) before the job starts. The demo's run under load is
the behavioural check (see docs/cli.md); this one catches the pattern in any script.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ._run import REPO

SCRIPTS = sorted(
    p for p in (REPO / "scripts").iterdir() if p.is_file() and p.read_text().startswith("#!/")
)
SHELL_SCRIPTS = [p for p in SCRIPTS if "bash" in p.read_text().split("\n", 1)[0]]

_BACKGROUND = re.compile(r"(?<![&|])&\s*$")  # a trailing `&`, not `&&`
_WRITES = re.compile(r"(?:\d?>|\btee)\s+(\"[^\"]+\"|\S+)")  # `> FILE`, `2> FILE`, `tee FILE`


def _commands(text: str) -> list[tuple[int, str]]:
    """``(line number, command)`` with backslash-continued lines joined, comments dropped."""
    commands: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if not pending:
            start = number
        if line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        commands.append((start, pending + line))
        pending = ""
    return commands


def background_writes_not_created_first(text: str) -> list[str]:
    """The files background jobs in ``text`` write without an earlier ``: > FILE``."""
    created: set[str] = set()
    missing = []
    for number, command in _commands(text):
        made = re.fullmatch(r"\s*:\s*>\s*(\"[^\"]+\"|\S+)\s*(#.*)?", command)
        if made:
            created.add(made.group(1))
            continue
        if _BACKGROUND.search(command):
            for target in _WRITES.findall(command):
                if target not in created and target not in ("/dev/null", "&1", "&2"):
                    missing.append(f"line {number}: {target}")
    return missing


def test_the_check_catches_the_race() -> None:
    racy = 'cmd > "$STATE/serve.out" 2> "$STATE/serve.err" &\nsed -n p "$STATE/serve.out"\n'
    assert background_writes_not_created_first(racy) == [
        'line 1: "$STATE/serve.out"',
        'line 1: "$STATE/serve.err"',
    ]
    fixed = ': > "$STATE/serve.out"\n: > "$STATE/serve.err"\n' + racy
    assert background_writes_not_created_first(fixed) == []
    piped = '(run 2>&1 || true) \\\n    | tee "$STATE/tree.out" &\n'
    assert background_writes_not_created_first(piped) == ['line 1: "$STATE/tree.out"']


def test_there_are_shell_scripts_to_check() -> None:
    assert {p.name for p in SHELL_SCRIPTS} >= {"demo", "test"}


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: p.name)
def test_background_jobs_write_only_files_created_before(script: Path) -> None:
    assert background_writes_not_created_first(script.read_text()) == []
