"""The cassette format: a recorded session as JSON lines, one event per line.

A cassette is meant to be read and diffed by a person (``git diff`` of a re-recorded session
shows what changed). Line 1 is the header; every later line is one event, in the order it
happened::

    {"opsbroker_cassette": 1, "root": "/srv/ws", "deny_read": [".env"]}
    {"t": "dir", "path": "src", "mode": 493}
    {"t": "file", "path": "src/a.py", "mode": 420, "mtime": 1764633600.0, "text": "print(1)\\n"}
    {"t": "file", "path": "logo.png", "mode": 420, "mtime": 1764633600.0, "base64": "iVBORw0K"}
    {"t": "file", "path": ".env", "mode": 384, "mtime": 1764633600.0, "size": 31, "denied": "deny_read: .env"}
    {"t": "op", "op": "read_file", "args": {"path": "/srv/ws/src/a.py"}, "ok": {"text": "print(1)\\n"}}
    {"t": "exec", "shell": "bash", "command": "pytest -q", "cwd": "/srv/ws", "state": "e3b0c442...",
     "chunks": [[0.012, "1 passed\\n"]], "exit": 0}
    {"t": "effect", "changes": [{"t": "file", "path": ".pytest_cache/v", ...}, {"t": "gone", "path": "x"}]}

- ``dir`` / ``file`` / ``link`` before the first ``op`` or ``exec``: the tree when recording began
  (paths relative to the root). File content is ``text`` when it is UTF-8, else ``base64``; a file
  over the snapshot bounds has ``size`` and ``omitted`` instead, and one the policy refuses to
  read has ``denied`` (the rule): its content is never written.
- ``op``: one file operation, its arguments and either ``ok`` (the result) or ``error``
  (``code``, ``op``, ``path``, ``reason``, ``rule``).
- ``exec``: one command: ``shell``, ``command``, ``cwd``, ``timeout``, the names of the ``env``
  it was given (never the values), ``state`` (see :class:`WrittenState`), its output ``chunks``
  as ``[seconds since the previous chunk, text]`` (``[seconds, {"base64": ...}]`` when not
  UTF-8), then ``exit`` (the code), or ``kill`` (the reason) and ``tail`` (seconds from the last
  chunk to the kill), or ``error`` as for ``op``.
- ``effect``: what the command just recorded changed in the tree (``file``, ``dir``, ``link``
  lines, or ``gone`` for a path that disappeared), applied when the command is replayed.

Hostile or damaged cassettes are refused with :class:`CassetteError`, naming the file and line:
a wrong header or version, a line that is not a JSON object, an unknown event, a missing field,
a path that leaves the root (``..``, absolute, empty parts), bad base64, a truncated last line.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._errors import OpsError, error_from_code

__all__ = [
    "CASSETTE_VERSION",
    "TREE_EVENTS",
    "CassetteError",
    "CassetteWriter",
    "WrittenState",
    "decode_bytes",
    "encode_bytes",
    "error_from_json",
    "error_to_json",
    "read_cassette",
]

CASSETTE_VERSION = 1
"""The format version in the header; a cassette of any other version is refused."""

HEADER_KEY = "opsbroker_cassette"

EVENT_FIELDS: Mapping[str, tuple[str, ...]] = {
    "dir": ("path", "mode"),
    "file": ("path", "mode"),
    "link": ("path", "target"),
    "gone": ("path",),
    "op": ("op", "args"),
    "exec": ("shell", "command", "cwd", "state", "chunks"),
    "effect": ("changes",),
}
"""Each event type and the fields it must have."""

TREE_EVENTS = frozenset({"dir", "file", "link", "gone"})


class CassetteError(Exception):
    """A cassette that cannot be used: unreadable, damaged, or not one (the message names the
    file and line and what to do)."""


def encode_bytes(data: bytes) -> dict[str, str]:
    """``{"text": ...}`` when ``data`` is UTF-8 (readable in a diff), else ``{"base64": ...}``."""
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def decode_bytes(value: Mapping[str, Any]) -> bytes:
    """The bytes of an :func:`encode_bytes` value. Raises ValueError on anything else."""
    if isinstance(value.get("text"), str):
        return str(value["text"]).encode("utf-8")
    if isinstance(value.get("base64"), str):
        return base64.b64decode(str(value["base64"]), validate=True)
    raise ValueError("expected a 'text' or 'base64' field")


def error_to_json(error: OpsError) -> dict[str, Any]:
    """An error as a cassette field: enough to rebuild the same type and message."""
    out: dict[str, Any] = {"code": error.code, "op": error.op, "path": error.path}
    out["reason"] = error.reason
    rule = getattr(error, "rule", None)
    if rule is not None:
        out["rule"] = rule
    return out


def error_from_json(value: Mapping[str, Any]) -> OpsError:
    """The error :func:`error_to_json` wrote (same type, same ``str()``)."""
    return error_from_code(
        str(value["code"]),
        str(value["op"]),
        None if value.get("path") is None else str(value["path"]),
        None if value.get("reason") is None else str(value["reason"]),
        rule=None if value.get("rule") is None else str(value["rule"]),
    )


class WrittenState:
    """What the agent's own file changes have done so far, as one digest.

    A replayed command must not answer with output recorded for other inputs. Hashing the tree a
    command could read would mean walking the whole workspace before every command, on the live
    backend and on replay. Instead the digest covers the paths the session changed through file
    operations (``write_file``, ``mkdir``, ``remove``, ``rename``) and what it put there: the tree
    a replay starts from is the recorded one, and the commands' own changes are replayed from the
    cassette, so the only way a replayed command can see other inputs than when it was recorded is
    a different file operation before it, which changes this digest. It is computed from the
    operations alone (no I/O), so the recorder and the replay compute it the same way.
    The price: an edit of a file the command never reads is a mismatch too.
    """

    __slots__ = ("_paths",)

    def __init__(self) -> None:
        self._paths: dict[str, str] = {}

    def wrote(self, path: str, content: bytes | str) -> None:
        data = content.encode() if isinstance(content, str) else content
        self._paths[path] = "file:" + hashlib.sha256(data).hexdigest()

    def made_dir(self, path: str) -> None:
        self._paths[path.rstrip("/") or path] = "dir"

    def removed(self, path: str) -> None:
        bare = path.rstrip("/") or path
        for key in [k for k in self._paths if k == bare or k.startswith(bare + "/")]:
            self._paths[key] = "gone"
        self._paths[bare] = "gone"

    def renamed(self, source: str, destination: str) -> None:
        src = source.rstrip("/") or source
        dst = destination.rstrip("/") or destination
        moved = {k: v for k, v in self._paths.items() if k == src or k.startswith(src + "/")}
        self.removed(src)
        for key, value in moved.items():
            self._paths[dst + key[len(src) :]] = value
        self._paths.setdefault(dst, "moved:" + src)

    def digest(self) -> str:
        """The SHA-256 of every changed path and its state, in path order."""
        h = hashlib.sha256()
        for path in sorted(self._paths):
            h.update(f"{path}\0{self._paths[path]}\n".encode())
        return h.hexdigest()


class CassetteWriter:
    """Appends events to a cassette file, one JSON line each, flushed as they come (a session
    that dies still leaves every finished event readable)."""

    def __init__(self, path: str | Path, header: Mapping[str, Any] | None = None) -> None:
        """Start a new cassette at ``path`` with ``header`` (``None``: append to an existing one)."""
        self.path = Path(path)
        if header is None:
            self._file = self.path.open("a", encoding="utf-8")
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("w", encoding="utf-8")
            self.write({HEADER_KEY: CASSETTE_VERSION, **header})

    def write(self, event: Mapping[str, Any]) -> None:
        self._file.write(json.dumps(event, ensure_ascii=False, separators=(", ", ": ")) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


@dataclass(frozen=True, slots=True)
class Event:
    """One line of a cassette after validation: its line number and its fields."""

    line: int
    data: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.data["t"])


def _check_rel(where: str, path: object) -> str:
    if not isinstance(path, str) or not path:
        raise CassetteError(f"{where}: 'path' must be a non-empty string, got {path!r}")
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in path:
        raise CassetteError(
            f"{where}: path {path!r} leaves the virtual root (absolute, '..', '.' or an empty "
            "part); a cassette's tree paths are relative to its root"
        )
    return path


def _check_event(where: str, data: dict[str, Any]) -> None:
    kind = data.get("t")
    fields = EVENT_FIELDS.get(kind) if isinstance(kind, str) else None
    if fields is None:
        known = ", ".join(sorted(EVENT_FIELDS))
        raise CassetteError(f"{where}: unknown event type {kind!r}; expected one of {known}")
    missing = [f for f in fields if f not in data]
    if missing:
        raise CassetteError(f"{where}: a {kind!r} event needs {', '.join(map(repr, missing))}")
    if kind in TREE_EVENTS:
        _check_tree(where, data)
    elif kind == "effect":
        if not isinstance(data["changes"], list):
            raise CassetteError(f"{where}: 'changes' must be a list of tree events")
        for change in data["changes"]:
            if not isinstance(change, dict) or change.get("t") not in TREE_EVENTS:
                raise CassetteError(f"{where}: each change must be a dir, file, link or gone event")
            _check_tree(where, change)
    elif kind == "exec":
        chunks = data["chunks"]
        if not isinstance(chunks, list) or not all(
            isinstance(c, list) and len(c) == 2 and isinstance(c[0], int | float) for c in chunks
        ):
            raise CassetteError(f"{where}: 'chunks' must be a list of [seconds, data] pairs")
        for _, piece in chunks:
            if not isinstance(piece, str):
                _decode_field(where, piece)
        for name in ("command", "cwd", "shell", "state"):
            if not isinstance(data[name], str):
                raise CassetteError(f"{where}: {name!r} must be a string")
        if "exit" not in data and "kill" not in data and "error" not in data:
            raise CassetteError(f"{where}: an exec event needs 'exit', 'kill' or 'error'")


def _check_tree(where: str, data: dict[str, Any]) -> None:
    _check_rel(where, data.get("path"))
    if data["t"] == "file" and not ({"text", "base64", "omitted", "denied"} & data.keys()):
        raise CassetteError(f"{where}: a file needs 'text', 'base64', 'omitted' or 'denied'")
    if data["t"] == "file" and "base64" in data:
        _decode_field(where, data)
    if data["t"] in ("dir", "file") and not isinstance(data.get("mode"), int):
        raise CassetteError(f"{where}: 'mode' must be an integer")


def _decode_field(where: str, value: object) -> bytes:
    try:
        if not isinstance(value, dict):
            raise ValueError("expected an object")
        return decode_bytes(value)
    except (ValueError, TypeError) as exc:
        raise CassetteError(f"{where}: bad content: {exc}") from None


def read_cassette(path: str | Path) -> tuple[dict[str, Any], Generator[Event, None, None]]:
    """Open ``path``: its validated header, and its events (validated one by one as read).

    Raises:
        CassetteError: the file cannot be read, the header is not an opsbroker cassette header of
            :data:`CASSETTE_VERSION`, or (while iterating) a line is malformed, names a path
            outside the root, or the last line is cut short.
    """
    source = Path(path)
    try:
        handle = source.open("r", encoding="utf-8")
    except OSError as exc:
        raise CassetteError(f"cassette {str(source)!r}: cannot open: {exc.strerror}") from None
    try:
        header = _parse(source, 1, handle.readline())
        _check_header(source, header)
    except BaseException:
        handle.close()
        raise
    return header, _events(source, handle)


def _check_header(source: Path, header: dict[str, Any]) -> None:
    version = header.get(HEADER_KEY)
    if version is None:
        raise CassetteError(
            f"{source}:1: not an opsbroker cassette (the first line has no {HEADER_KEY!r})"
        )
    if version != CASSETTE_VERSION:
        raise CassetteError(
            f"{source}:1: cassette version {version!r}; this opsbroker reads version "
            f"{CASSETTE_VERSION}: re-record it (pytest --record-mode=rewrite)"
        )
    if not isinstance(header.get("root"), str) or not str(header["root"]).startswith("/"):
        raise CassetteError(f"{source}:1: the header needs an absolute 'root'")


def _events(source: Path, handle: Any) -> Generator[Event, None, None]:
    with handle:
        for number, line in enumerate(handle, start=2):
            if not line.strip():
                continue
            data = _parse(source, number, line)
            _check_event(f"{source}:{number}", data)
            yield Event(number, data)


def _parse(source: Path, number: int, line: str) -> dict[str, Any]:
    where = f"{source}:{number}"
    if not line.endswith("\n"):
        raise CassetteError(f"{where}: the line is cut short (a truncated cassette); re-record it")
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise CassetteError(f"{where}: not valid JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(data, dict):
        raise CassetteError(f"{where}: expected a JSON object, got {type(data).__name__}")
    return data
