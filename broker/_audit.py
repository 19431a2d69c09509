"""The audit trail: one JSON line per operation and per refusal, hash-chained.

Every line is a JSON object whose last member is ``"hash"``: the SHA-256 (hex) of the line's own
bytes up to that member, with the closing ``}`` put back. Every line also carries ``"prev"``, the
hash of the line before it, and ``"seq"``, one more than the line before it. So:

- editing a line breaks its own hash;
- inserting or deleting a line breaks the ``prev`` / ``seq`` link of the line after it;
- a file starts with a ``header`` line whose ``prev`` is the last hash of the previous file (or
  :data:`GENESIS` for the first file ever), so rotation keeps one chain across files.

The chain has no secret key, so it proves a file was not altered *in place* after the fact; cutting
lines off the end, or rewriting the whole file from some line on, is detected only against a hash
recorded elsewhere (``opsbroker audit verify --head HASH``). Nothing secret is written: callers
pass paths, sizes, decisions and codes, never contents or credentials.

``AuditLog.record`` is synchronous and fast: one ``write(2)`` of one line to a file opened with
``O_APPEND`` (no ``fsync`` unless asked), under a lock so concurrent tasks and threads keep the
chain ordered.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "GENESIS",
    "AuditError",
    "AuditLog",
    "AuditUnavailable",
    "VerifyResult",
    "format_time",
    "read_records",
    "verify_files",
]

GENESIS = "0" * 64
"""The ``prev`` of the first header ever written: no line comes before it."""

FORMAT_VERSION = 1

TAIL_READ_BYTES = 1 << 20
"""How much of an existing file is read on open to find its last line (longer lines are refused)."""

RESERVED = frozenset({"seq", "time", "type", "prev", "hash"})
"""Members every line has, set by the log itself."""

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)

_HASH_SUFFIX_LEN = len(',"hash":"') + 64 + len('"}')


class AuditError(Exception):
    """An audit file cannot be opened or continued (for example, its last line is damaged)."""


class AuditUnavailable(AuditError):
    """A line could not be written; with ``audit.fail_closed`` the broker refuses operations."""


def format_time(seconds: float) -> str:
    """UTC ISO 8601 with milliseconds and ``Z``; sorts as text in time order."""
    moment = _dt.datetime.fromtimestamp(seconds, _dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _seal(body: str) -> str:
    """Append ``"hash"`` to the JSON object text ``body`` (which ends with ``}``)."""
    digest = hashlib.sha256(body.encode()).hexdigest()
    return f'{body[:-1]},"hash":"{digest}"}}'


def _unseal(line: str) -> tuple[str, str] | None:
    """Split a sealed line into (body, claimed hash), or ``None`` if it is not one."""
    if len(line) < _HASH_SUFFIX_LEN or not line.endswith('"}'):
        return None
    head = line[:-_HASH_SUFFIX_LEN]
    tail = line[-_HASH_SUFFIX_LEN:]
    if not tail.startswith(',"hash":"'):
        return None
    return head + "}", tail[len(',"hash":"') : -2]


class AuditLog:
    """An append-only, hash-chained JSON-lines file.

    Args:
        path: the file; created (mode 0600) if missing, continued (chain and sequence) if not.
        fsync: ``fsync`` after every line.
        rotate_bytes: once the file reaches this size, it is renamed to ``<path>.<seq>`` (the
            ``seq`` of its header, zero-padded) and a new file continues the chain; 0 never rotates.
        clock: seconds since the epoch (tests pass a fixed clock).

    Raises:
        AuditError: the file cannot be opened, or its last line is damaged (verify the file,
            then move it aside; the broker does not extend a chain it cannot read).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: bool = False,
        rotate_bytes: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self._fsync = fsync
        self._rotate_bytes = rotate_bytes
        self._clock = clock
        self._lock = threading.Lock()
        self._fd = -1
        self._closed = False
        self._size = 0
        self._seq, self._prev = -1, GENESIS
        self.healthy = True
        """False after a failed write, until a later write succeeds."""
        self._open(resume=True)

    @property
    def last_hash(self) -> str:
        """The hash of the last line written (what the next line's ``prev`` will be)."""
        return self._prev

    def _resume(self) -> tuple[int, str]:
        try:
            with open(self.path, "rb") as file:
                size = file.seek(0, os.SEEK_END)
                file.seek(max(0, size - TAIL_READ_BYTES))
                tail = file.read()
        except FileNotFoundError:
            return -1, GENESIS
        except OSError as exc:
            raise AuditError(f"cannot read audit log {str(self.path)!r}: {exc.strerror}") from None
        if not tail:
            return -1, GENESIS
        last = tail.rstrip(b"\n").rsplit(b"\n", 1)[-1].decode(errors="replace")
        sealed = _unseal(last)
        record = _parse(sealed[0]) if sealed else None
        if not tail.endswith(b"\n") or record is None or not isinstance(record.get("seq"), int):
            raise AuditError(
                f"audit log {str(self.path)!r} ends with a damaged line; run "
                f"`opsbroker audit verify {self.path}` and move the file aside to start a new one"
            )
        return _int(record["seq"]), sealed[1] if sealed else GENESIS

    def _open(self, *, resume: bool = False) -> None:
        """Open (creating it) and lock the file; continue its chain or start it with a header."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise AuditError(f"cannot open audit log {str(self.path)!r}: {exc.strerror}") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise AuditError(
                    f"audit log {str(self.path)!r} is in use by another process; give each "
                    "broker its own file (two writers would break the chain)"
                ) from None
            size = os.fstat(fd).st_size
            if resume:
                self._seq, self._prev = self._resume()
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._size = size
        if size == 0:
            self._write({"type": "header", "version": FORMAT_VERSION})

    def record(self, event: Mapping[str, object]) -> None:
        """Append one line: ``seq``, ``time``, the ``event`` members in order, ``prev``, ``hash``.

        Raises:
            AuditUnavailable: the line could not be written (disk full, file closed...). The
                chain is unchanged, so a later successful write still verifies.
            ValueError: ``event`` uses a member the log sets itself (``seq``, ``time``, ...).
        """
        clash = RESERVED.intersection(event)
        if clash:
            raise ValueError(f"audit event may not set {sorted(clash)}: the log sets them")
        with self._lock:
            if self._fd < 0 and not self._closed:
                try:
                    self._open()  # a rotation that could not reopen the file: try again
                except AuditError as exc:
                    self.healthy = False
                    raise AuditUnavailable(str(exc)) from None
            self._write({"type": "op", **event})
            if self._rotate_bytes and self._size >= self._rotate_bytes:
                self._rotate()

    def _write(self, event: Mapping[str, object]) -> None:
        seq = self._seq + 1
        body = {"seq": seq, "time": format_time(self._clock()), **event, "prev": self._prev}
        line = _seal(_ENCODER.encode(body))
        data = (line + "\n").encode()
        try:
            if self._fd < 0:
                raise OSError(9, "audit log is closed")
            written = os.write(self._fd, data)
            if written != len(data):
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, self._size)  # never leave half a line behind
                raise OSError(28, f"short write ({written} of {len(data)} bytes)")
            if self._fsync:
                os.fsync(self._fd)
        except OSError as exc:
            self.healthy = False
            raise AuditUnavailable(
                f"cannot write audit log {str(self.path)!r}: {exc.strerror or exc}"
            ) from None
        self.healthy = True
        self._seq = seq
        self._prev = line[-_HASH_SUFFIX_LEN + len(',"hash":"') : -2]
        self._size += len(data)

    def _rotate(self) -> None:
        target = self.path.with_name(f"{self.path.name}.{self._first_seq():010d}")
        try:
            os.rename(self.path, target)
        except OSError:
            return  # keep appending to this file; the next line tries again
        os.close(self._fd)
        self._fd = -1
        with contextlib.suppress(AuditError):
            self._open()  # on failure the next record retries, and fails closed if it must

    def _first_seq(self) -> int:
        with open(self.path, "rb") as file:
            first = file.readline().decode(errors="replace")
        sealed = _unseal(first.rstrip("\n"))
        record = _parse(sealed[0]) if sealed else None
        seq = record.get("seq") if record else None
        return seq if isinstance(seq, int) else self._seq

    def close(self) -> None:
        """Close the file. Later ``record`` calls raise :class:`AuditUnavailable`. Idempotent."""
        with self._lock:
            self._closed = True
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def _int(value: object) -> int:
    return value if isinstance(value, int) else -1


def _parse(text: str) -> dict[str, object] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def read_records(paths: Iterable[str | os.PathLike[str]]) -> Iterator[dict[str, object]]:
    """Every operation record (not headers) of the files, in order, without verifying them.

    A line that is not valid JSON is skipped; run :func:`verify_files` to learn about it.
    """
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as file:
            for line in file:
                record = _parse(line)
                if record is not None and record.get("type") == "op":
                    yield record


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """The outcome of :func:`verify_files`.

    ``ok`` is true when every line verifies. Otherwise ``file`` and ``line`` (1-based) say where
    the chain first breaks and ``problem`` says how. ``lines`` counts the lines checked;
    ``first_prev`` is what the first file chains to (:data:`GENESIS` or an earlier file's last
    hash), ``last_hash`` the hash of the last good line.
    """

    ok: bool
    lines: int
    last_hash: str
    first_prev: str | None = None
    file: str | None = None
    line: int | None = None
    problem: str | None = None


def verify_files(
    paths: Iterable[str | os.PathLike[str]], *, head: str | None = None
) -> VerifyResult:
    """Check the chain through ``paths`` (oldest first, as rotation names them).

    Args:
        head: if given, the chain must end at this hash (recorded elsewhere); this detects lines
            cut off the end, which the chain alone cannot.
    """
    prev: str | None = None
    seq = 0
    first_prev: str | None = None
    count = 0
    name: str | None = None
    for path in paths:
        name = str(path)
        with open(path, "rb") as file:
            for number, raw in enumerate(file, start=1):
                count += 1
                problem, record, claimed = _check_line(raw, number)
                if problem is None and record is not None:
                    this_seq, this_prev = record["seq"], record["prev"]
                    if prev is None:
                        first_prev = str(this_prev)
                    elif this_prev != prev or this_seq != seq + 1:
                        problem = (
                            f"the line does not follow the one before it (seq {this_seq} after "
                            f"{seq}): a line was inserted or deleted before it"
                        )
                if problem is not None:
                    return VerifyResult(
                        False, count, prev or GENESIS, first_prev, name, number, problem
                    )
                prev = claimed
                seq = _int(record["seq"]) if record is not None else seq
    if head is not None and prev != head:
        problem = f"the chain ends at {prev} but {head} was expected: lines were cut off the end"
        return VerifyResult(False, count, prev or GENESIS, first_prev, name, None, problem)
    return VerifyResult(True, count, prev or GENESIS, first_prev)


def _check_line(raw: bytes, number: int) -> tuple[str | None, dict[str, object] | None, str]:
    """(problem or None, record, claimed hash) for one raw line of a file."""
    if not raw.endswith(b"\n"):
        return "the line is incomplete (no newline): a write was cut short", None, ""
    try:
        line = raw[:-1].decode()
    except UnicodeDecodeError:
        return "the line is not UTF-8: it was edited", None, ""
    sealed = _unseal(line)
    record = _parse(sealed[0]) if sealed else None
    if sealed is None or record is None:
        return "the line is not a sealed audit record: it was edited", None, ""
    body, claimed = sealed
    if hashlib.sha256(body.encode()).hexdigest() != claimed:
        return "the line's hash does not match its content: it was edited", None, claimed
    if not isinstance(record.get("seq"), int) or not isinstance(record.get("prev"), str):
        return "the line has no seq/prev: it was edited", None, claimed
    if number == 1 and record.get("type") != "header":
        return "the file does not start with a header: lines were deleted", None, claimed
    return None, record, claimed
