"""``opsbroker audit verify|query|summary``: read an audit trail.

- ``verify FILE...``: exit status 0 when the chain is intact, 1 when it breaks (the message names
  the file, the line and how), 2 when a file cannot be read. Rotated files are given oldest
  first (``audit.log.* audit.log``).
- ``query FILE...``: the records that pass every filter (``--principal``, ``--operation``,
  ``--path GLOB``, ``--decision``, ``--since``, ``--until``), as a table or JSON lines.
- ``summary FILE...``: per principal, the reads, writes, commands, refusals and errors, and the
  paths touched most.

Register with ``broker._cli``: add ``"broker._cli_audit"`` to its ``SUBCOMMANDS``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TextIO

from operations import InvalidArgument, compile_glob

from ._audit import format_time, read_records, verify_files

__all__ = ["add_parser", "main", "run"]

READ_OPS = frozenset(
    {"read_file", "access", "detect_image_mime_type", "readdir", "list_dir", "glob", "search"}
)
WRITE_OPS = frozenset({"write_file", "mkdir", "remove", "rename"})
COMMAND_OPS = frozenset({"exec", "exec_powershell"})
TOP_PATHS = 5  # paths listed per principal in a summary

UNAUTHENTICATED = "(unauthenticated)"
"""How a summary names the records of callers refused before they had a principal."""

Record = dict[str, object]


def add_parser(subparsers: Any) -> None:
    """Register ``audit`` and its three subcommands on the ``opsbroker`` parser."""
    audit = subparsers.add_parser(
        "audit",
        help="verify, query or summarise an audit log",
        description="Read the hash-chained JSON-lines audit log a broker writes.",
    )
    commands = audit.add_subparsers(dest="audit_command", required=True, metavar="ACTION")

    verify = commands.add_parser("verify", help="check the hash chain (exit 1 where it breaks)")
    verify.add_argument("files", nargs="+", metavar="FILE", help="oldest first")
    verify.add_argument("--head", metavar="HASH", help="the last hash, recorded elsewhere")
    verify.set_defaults(handler=run)

    query = commands.add_parser("query", help="list the records that match filters")
    query.add_argument("files", nargs="+", metavar="FILE")
    query.add_argument("--principal", action="append", help="repeatable")
    query.add_argument("--operation", action="append", help="repeatable, e.g. exec")
    query.add_argument("--path", metavar="GLOB", help="requested or resolved path matches GLOB")
    query.add_argument("--decision", choices=("allow", "deny", "error"))
    query.add_argument("--since", metavar="TIME", help="ISO 8601, e.g. 2026-05-01T12:00Z")
    query.add_argument("--until", metavar="TIME", help="ISO 8601, exclusive")
    query.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    query.set_defaults(handler=run)

    summary = commands.add_parser("summary", help="per principal: reads, writes, commands...")
    summary.add_argument("files", nargs="+", metavar="FILE")
    summary.add_argument("--json", action="store_true", help="one JSON object")
    summary.set_defaults(handler=run)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run the ``audit`` subcommand in ``args``; return the exit status."""
    out = sys.stdout if out is None else out
    try:
        if args.audit_command == "verify":
            return _verify(args, out)
        records = read_records(args.files)
        if args.audit_command == "query":
            return _query(args, records, out)
        return _summary(args, records, out)
    except OSError as exc:
        print(f"opsbroker audit: cannot read {exc.filename!r}: {exc.strerror}", file=sys.stderr)
        return 2
    except (ValueError, InvalidArgument) as exc:
        print(f"opsbroker audit {args.audit_command}: {exc}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """``opsbroker audit ...`` on its own (tests, and until ``broker._cli`` registers it)."""
    parser = argparse.ArgumentParser(prog="opsbroker")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return run(args, out)


# -- verify -----------------------------------------------------------------------------------


def _verify(args: argparse.Namespace, out: TextIO) -> int:
    result = verify_files(args.files, head=args.head)
    if result.ok:
        chained = (
            "" if result.first_prev in (None, "0" * 64) else f", chained to {result.first_prev}"
        )
        print(f"intact: {result.lines} lines, last hash {result.last_hash}{chained}", file=out)
        return 0
    where = f"{result.file}:{result.line}" if result.line is not None else str(result.file)
    print(f"broken at {where}: {result.problem}", file=out)
    return 1


# -- query ------------------------------------------------------------------------------------


def _timestamp(text: str) -> str:
    """An ISO 8601 time as the log writes it (UTC, milliseconds), for text comparison."""
    try:
        moment = _dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 time (e.g. 2026-05-01T12:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.UTC)
    return format_time(moment.timestamp())


def _filters(args: argparse.Namespace) -> list[Callable[[Record], bool]]:
    tests: list[Callable[[Record], bool]] = []
    if args.principal:
        principals = set(args.principal)
        tests.append(lambda r: r.get("principal") in principals)
    if args.operation:
        operations = set(args.operation)
        tests.append(lambda r: r.get("op") in operations)
    if args.decision:
        decision = args.decision
        tests.append(lambda r: r.get("decision") == decision)
    if args.since:
        since = _timestamp(args.since)
        tests.append(lambda r: str(r.get("time", "")) >= since)
    if args.until:
        until = _timestamp(args.until)
        tests.append(lambda r: str(r.get("time", "")) < until)
    if args.path:
        matcher = compile_glob(args.path, op="audit query")

        def path_matches(record: Record) -> bool:
            for key in ("resolved", "path"):
                value = record.get(key)
                if isinstance(value, str) and matcher.match(value.lstrip("/")):
                    return True
            return False

        tests.append(path_matches)
    return tests


def select(records: Iterable[Record], args: argparse.Namespace) -> Iterator[Record]:
    """The records that pass every filter in ``args``."""
    tests = _filters(args)
    return (record for record in records if all(test(record) for test in tests))


COLUMNS = ("time", "principal", "transport", "op", "decision", "path", "detail")


def _detail(record: Record) -> str:
    if record.get("reason"):
        return str(record["reason"])
    if record.get("kill_reason"):
        return f"killed: {record['kill_reason']}"
    if record.get("exit_code") is not None:
        return f"exit {record['exit_code']}"
    return ""


def _query(args: argparse.Namespace, records: Iterable[Record], out: TextIO) -> int:
    chosen = select(records, args)
    if args.json:
        for record in chosen:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
        return 0
    rows = [
        [str(record.get(c, "") or "") for c in COLUMNS[:-1]] + [_detail(record)]
        for record in chosen
    ]
    _table([list(COLUMNS), *rows], out)
    return 0


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        out.write(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
        out.write("\n")


# -- summary ----------------------------------------------------------------------------------


def summarise(records: Iterable[Record]) -> dict[str, dict[str, object]]:
    """Per principal: counts of reads, writes, commands, refusals, errors; the top paths."""
    counts: dict[str, Counter[str]] = {}
    paths: dict[str, Counter[str]] = {}
    for record in records:
        principal = record.get("principal")
        who = UNAUTHENTICATED if principal is None else str(principal)
        tally = counts.setdefault(who, Counter())
        op = record.get("op")
        if op in READ_OPS:
            tally["reads"] += 1
        elif op in WRITE_OPS:
            tally["writes"] += 1
        elif op in COMMAND_OPS:
            tally["commands"] += 1
        else:
            tally["metadata"] += 1
        decision = record.get("decision")
        if decision == "deny":
            tally["refusals"] += 1
        elif decision == "error":
            tally["errors"] += 1
        path = record.get("resolved") or record.get("path")
        if isinstance(path, str) and path:
            paths.setdefault(who, Counter())[path] += 1
    return {
        who: {
            **{
                k: tally[k]
                for k in ("reads", "writes", "commands", "metadata", "refusals", "errors")
            },
            "top_paths": paths.get(who, Counter()).most_common(TOP_PATHS),
        }
        for who, tally in sorted(counts.items())
    }


def _summary(args: argparse.Namespace, records: Iterable[Record], out: TextIO) -> int:
    summary = summarise(records)
    if args.json:
        out.write(json.dumps(summary, ensure_ascii=False) + "\n")
        return 0
    header = ["principal", "reads", "writes", "commands", "metadata", "refusals", "errors"]
    rows = [header] + [[who] + [str(data[k]) for k in header[1:]] for who, data in summary.items()]
    _table(rows, out)
    for who, data in summary.items():
        top = data["top_paths"]
        assert isinstance(top, list)
        listed = ", ".join(f"{path} ({count})" for path, count in top)
        out.write(f"top paths of {who}: {listed or '-'}\n")
    return 0
