"""``opsbroker ps|attach|kill URL``: the processes a broker keeps for the caller.

``ps`` lists them; ``attach URL ID`` replays a process's output from an offset and follows it
(Ctrl-C detaches: the process goes on); ``kill URL ID`` kills its whole tree. Exit status 0, 2 for
bad input, 3 when the backend is unreachable or refuses (see :mod:`agent_side._cli`).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from operations import ProcessInfo

from ._cli import (
    EXIT_OK,
    CliError,
    add_backend_arguments,
    one_line_usage_errors,
    open_backend,
    run_command,
)

__all__ = ["add_parser", "describe"]


def add_parser(subparsers: Any) -> None:
    ps = subparsers.add_parser(
        "ps",
        help="list the processes the broker keeps for you",
        description="List the caller's processes on the backend at URL, running and finished.",
        epilog="example: opsbroker ps grpc://127.0.0.1:7443 --token-file TOKENS",
    )
    one_line_usage_errors(ps, "ps")
    add_backend_arguments(ps)
    ps.set_defaults(handler=lambda args: run_command("ps", lambda: _ps(args)))

    attach = subparsers.add_parser(
        "attach",
        help="replay a process's output and follow it (Ctrl-C detaches)",
        description=(
            "Write the output of process ID from OFFSET on to stdout, then follow it until the "
            "process ends. Ctrl-C detaches; the process goes on."
        ),
    )
    one_line_usage_errors(attach, "attach")
    add_backend_arguments(attach)
    attach.add_argument("id", metavar="ID", help="the process id, as `opsbroker ps` shows it")
    attach.add_argument(
        "--from",
        dest="from_offset",
        type=int,
        default=0,
        metavar="OFFSET",
        help="the output offset to replay from (default 0: all the broker still holds)",
    )
    attach.set_defaults(handler=lambda args: run_command("attach", lambda: _attach(args)))

    kill = subparsers.add_parser(
        "kill",
        help="kill a process's whole tree",
        description="Kill process ID and every process it started; print its final record.",
    )
    one_line_usage_errors(kill, "kill")
    add_backend_arguments(kill)
    kill.add_argument("id", metavar="ID", help="the process id, as `opsbroker ps` shows it")
    kill.set_defaults(handler=lambda args: run_command("kill", lambda: _kill(args)))


def describe(info: ProcessInfo) -> str:
    """One line of ``ps``: id, state, how it ended, output bytes, age, command."""
    if info.exit_code is not None:
        end = f"exit {info.exit_code}"
    elif info.signal is not None:
        end = f"signal {info.signal}"
    elif info.kill_reason is not None:
        end = f"killed ({info.kill_reason.value})"
    else:
        end = "-"
    age = max(0.0, time.time() - info.started_at)
    command = " ".join(info.command.split())
    return f"{info.id}\t{info.state.value}\t{end}\t{info.bytes_out}\t{age:.0f}s\t{command}"


async def _ps(args: argparse.Namespace) -> int:
    async with open_backend(args) as backend:
        found = await backend.processes.list_processes()
    print("ID\tSTATE\tEND\tBYTES\tAGE\tCOMMAND")
    for info in found:
        print(describe(info))
    return EXIT_OK


async def _attach(args: argparse.Namespace) -> int:
    if args.from_offset < 0:
        raise CliError(f"--from must be >= 0, got {args.from_offset}")
    out = sys.stdout.buffer
    async with open_backend(args) as backend:
        processes = backend.processes
        async for output in processes.attach(args.id, from_offset=args.from_offset):
            if output.dropped:
                print(
                    f"opsbroker attach: {output.dropped} bytes before offset {output.offset} "
                    "are no longer kept",
                    file=sys.stderr,
                    flush=True,
                )
            out.write(output.data)
            out.flush()
        info = await processes.wait(args.id)
    print(f"opsbroker attach: {describe(info)}", file=sys.stderr)
    return EXIT_OK


async def _kill(args: argparse.Namespace) -> int:
    async with open_backend(args) as backend:
        info = await backend.processes.kill(args.id)
    print(describe(info))
    return EXIT_OK
