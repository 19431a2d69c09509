"""Hostile or damaged cassettes: each is refused with a CassetteError naming the file and line,
and nothing is created outside the virtual root."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from operations import CassetteError, InMemoryOperations

HEADER = json.dumps({"opsbroker_cassette": 1, "root": "/ws"}) + "\n"
EXEC = {"t": "exec", "shell": "bash", "command": "x", "cwd": "/ws", "state": "s", "chunks": []}


@dataclass(frozen=True)
class Case:
    name: str
    text: str
    line: int
    want: str


def _line(event: object) -> str:
    return json.dumps(event) + "\n"


CASES = [
    Case("empty file", "", 1, "cut short"),
    Case("truncated header", HEADER[:-5], 1, "cut short"),
    Case(
        "truncated last line",
        HEADER + _line({"t": "dir", "path": "a", "mode": 493})[:-3],
        2,
        "cut short",
    ),
    Case("not a cassette", _line({"hello": 1}), 1, "not an opsbroker cassette"),
    Case("wrong version", _line({"opsbroker_cassette": 99, "root": "/ws"}), 1, "version 99"),
    Case("relative root", _line({"opsbroker_cassette": 1, "root": "ws"}), 1, "absolute 'root'"),
    Case("malformed json", HEADER + "{not json}\n", 2, "not valid JSON"),
    Case("not an object", HEADER + "[1, 2]\n", 2, "expected a JSON object"),
    Case("unknown event", HEADER + _line({"t": "boom"}), 2, "unknown event type 'boom'"),
    Case("missing field", HEADER + _line({"t": "file", "path": "a"}), 2, "needs 'mode'"),
    Case(
        "dotdot path",
        HEADER + _line({"t": "file", "path": "../etc/x", "mode": 420, "text": "x"}),
        2,
        "leaves the virtual root",
    ),
    Case(
        "absolute path",
        HEADER + _line({"t": "dir", "path": "/etc", "mode": 493}),
        2,
        "leaves the virtual root",
    ),
    Case(
        "escape in an effect",
        HEADER
        + _line({**EXEC, "exit": 0})
        + _line({"t": "effect", "changes": [{"t": "gone", "path": "a/../../b"}]}),
        3,
        "leaves the virtual root",
    ),
    Case(
        "bad base64",
        HEADER + _line({"t": "file", "path": "a", "mode": 420, "base64": "!!!"}),
        2,
        "bad content",
    ),
    Case("exec without an end", HEADER + _line(EXEC), 2, "needs 'exit', 'kill' or 'error'"),
    Case(
        "bad chunks",
        HEADER + _line({**EXEC, "chunks": [["soon", "x"]], "exit": 0}),
        2,
        "[seconds, data] pairs",
    ),
    Case("unknown kill", HEADER + _line({**EXEC, "kill": "nuked"}), 2, "unknown kill reason"),
    Case("effect first", HEADER + _line({"t": "effect", "changes": []}), 2, "no command before"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_hostile_cassette_is_refused(tmp_path: Path, case: Case) -> None:
    path = tmp_path / "bad.cassette"
    path.write_text(case.text)
    with pytest.raises(CassetteError) as caught:
        InMemoryOperations.from_cassette(path)
    message = str(caught.value)
    assert f"{path}:{case.line}:" in message
    assert case.want in message


def test_missing_cassette(tmp_path: Path) -> None:
    with pytest.raises(CassetteError, match="cannot open"):
        InMemoryOperations.from_cassette(tmp_path / "nope.cassette")


def test_a_good_cassette_stays_inside_its_root(tmp_path: Path) -> None:
    path = tmp_path / "ok.cassette"
    path.write_text(
        HEADER
        + _line({"t": "file", "path": "a/b.txt", "mode": 420, "text": "hi"})
        + _line({**EXEC, "exit": 0})
        + _line({"t": "effect", "changes": [{"t": "gone", "path": "a/b.txt"}]})
    )
    ops = InMemoryOperations.from_cassette(path)
    assert ops.snapshot() == {"a/b.txt": b"hi"}
    assert list(ops.vfs.top.children) == ["ws"]  # nothing seeded beside the root
