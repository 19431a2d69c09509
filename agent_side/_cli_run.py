"""``opsbroker run URL FILE``: an assistant message's batch of tool calls, with its event stream.

FILE (``-`` for stdin) holds an assistant message in the reference's wire form::

    {"role": "assistant", "stopReason": "toolUse", "content": [
        {"type": "toolCall", "id": "call_1", "name": "read", "arguments": {"path": "README.md"}}]}

The batch runs through :func:`agent_side.loop.execute_tool_calls` (parallel unless a tool asks
otherwise). Each event is printed as it happens: one line per start, update and end, then each
result message with its model-visible text; a command that runs longer than
:data:`PROGRESS_INTERVAL_S` without output gets a progress line at that interval. ``--json`` prints
the events as JSON lines instead. Exit status 0 when every result is a success, 1 when any is an
error (a one-line summary on stderr names them); see :mod:`agent_side._cli`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from pydantic import ValidationError

from ._cli import (
    EXIT_OK,
    EXIT_TOOL_ERROR,
    CliError,
    add_backend_arguments,
    one_line_usage_errors,
    open_tools,
    read_input,
    read_json,
    run_command,
    write_out,
)
from ._cli_call import model_visible_text
from ._loop import execute_tool_calls
from ._messages import (
    AgentEvent,
    AgentToolResult,
    AssistantMessage,
    MessageEndEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
    ToolExecutionUpdateEvent,
    ToolResultMessage,
)

__all__ = ["EventPrinter", "add_parser", "load_assistant_message", "run"]

PROGRESS_INTERVAL_S = 1.0
"""A running call silent for this long gets a progress line (often enough to show it is alive)."""

SUMMARY_CHARS = 100
"""Longest argument or output excerpt on an event line (one terminal line)."""


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run an assistant message's tool calls and print the event stream",
        description=(
            "Run the toolCall blocks of an assistant message (JSON, the reference's wire names) "
            "against the backend at URL through the full tool loop, printing each event. "
            "Exit status: 0 every result is a success, 1 some result is an error, 2 bad input, "
            "3 backend unreachable or credentials refused."
        ),
    )
    one_line_usage_errors(parser, "run")
    add_backend_arguments(parser)
    parser.add_argument("file", metavar="FILE", help="the assistant message JSON ('-' for stdin)")
    parser.add_argument("--json", action="store_true", help="print the events as JSON lines")
    parser.add_argument(
        "--sequential",
        action="store_true",
        help="run the calls one after another (default: in parallel, as the loop does)",
    )
    parser.set_defaults(handler=run)


def load_assistant_message(source: str) -> AssistantMessage:
    """Read and validate the assistant message in ``source`` (a path, or ``-`` for stdin)."""
    value = read_json(read_input(source, "file"), f"{source!r}")
    if isinstance(value, list):
        value = {"content": value}  # a bare content array is accepted too
    if not isinstance(value, dict):
        raise CliError(f"{source!r} must hold an assistant message (a JSON object)")
    role = value.setdefault("role", "assistant")
    if role != "assistant":
        raise CliError(f"{source!r} holds a {role!r} message; expected role 'assistant'")
    try:
        message = AssistantMessage.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "message"
        raise CliError(
            f"{source!r} is not a valid assistant message: {where}: {first['msg']}"
        ) from None
    if not message.tool_calls:
        raise CliError(f"{source!r} has no toolCall blocks; nothing to run")
    return message


def _one_line(text: str, limit: int = SUMMARY_CHARS) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _text(result: AgentToolResult[Any] | ToolResultMessage[Any]) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


class EventPrinter:
    """Prints events human-readably and shows progress for calls running long in silence."""

    def __init__(self) -> None:
        self._running: dict[str, tuple[str, float]] = {}  # id -> (tool name, start time)
        self._last_line: dict[str, float] = {}

    def _print(self, line: str, call_id: str | None = None) -> None:
        write_out(line + "\n")
        if call_id is not None:
            self._last_line[call_id] = time.monotonic()

    def __call__(self, event: AgentEvent) -> None:
        if isinstance(event, ToolExecutionStartEvent):
            now = time.monotonic()
            self._running[event.tool_call_id] = (event.tool_name, now)
            args = _one_line(json.dumps(event.args, ensure_ascii=False))
            self._print(
                f"start   [{event.tool_call_id}] {event.tool_name} {args}", event.tool_call_id
            )
        elif isinstance(event, ToolExecutionUpdateEvent):
            output = _text(event.partial_result).rstrip("\n")
            if not output:
                return  # the "started, no output yet" update says nothing the start line did not
            lines = output.count("\n") + 1
            last = _one_line(output.rsplit("\n", 1)[-1])
            self._print(
                f"update  [{event.tool_call_id}] {event.tool_name} {self._elapsed(event.tool_call_id)}"
                f" {lines} line{'s' if lines != 1 else ''} of output, last: {last}",
                event.tool_call_id,
            )
        elif isinstance(event, ToolExecutionEndEvent):
            elapsed = self._elapsed(event.tool_call_id)
            self._running.pop(event.tool_call_id, None)
            status = "ERROR" if event.is_error else "ok"
            text = _text(event.result).rstrip("\n")
            first = _one_line(text.split("\n", 1)[0]) if text else ""
            lines = text.count("\n") + 1 if text else 0
            self._print(
                f"end     [{event.tool_call_id}] {event.tool_name} {status} {elapsed}"
                f" ({lines} line{'s' if lines != 1 else ''}): {first}"
            )
        elif isinstance(event, MessageEndEvent) and isinstance(event.message, ToolResultMessage):
            message = event.message
            status = "ERROR" if message.is_error else "ok"
            body = model_visible_text(message).rstrip("\n")
            indented = "\n".join(f"    | {line}" for line in body.split("\n")) if body else ""
            self._print(f"result  [{message.tool_call_id}] {message.tool_name} {status}")
            if indented:
                self._print(indented)

    def _elapsed(self, call_id: str) -> str:
        started = self._running.get(call_id)
        return "" if started is None else f"{time.monotonic() - started[1]:.1f}s"

    async def show_progress(self) -> None:
        """Until cancelled: a progress line for each call silent for :data:`PROGRESS_INTERVAL_S`."""
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL_S / 4)
            now = time.monotonic()
            for call_id, (name, _started) in list(self._running.items()):
                if now - self._last_line.get(call_id, now) >= PROGRESS_INTERVAL_S:
                    self._print(
                        f"running [{call_id}] {name} {self._elapsed(call_id)}, no new output",
                        call_id,
                    )


def _print_json(event: AgentEvent) -> None:
    write_out(json.dumps(event.to_wire(), ensure_ascii=False) + "\n")


async def _run(args: argparse.Namespace) -> int:
    message = load_assistant_message(args.file)
    printer = EventPrinter()
    async with open_tools(args) as (_backend, tools):
        progress = None if args.json else asyncio.create_task(printer.show_progress())
        try:
            batch = await execute_tool_calls(
                tools,
                message,
                emit=_print_json if args.json else printer,
                tool_execution="sequential" if args.sequential else "parallel",
            )
        finally:
            if progress is not None:
                progress.cancel()
    failed = [m for m in batch.messages if m.is_error]
    if failed:
        names = ", ".join(f"{m.tool_call_id} ({m.tool_name})" for m in failed)
        print(
            f"opsbroker run: {len(failed)} of {len(batch.messages)} tool calls failed: {names}",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_TOOL_ERROR
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    return run_command("run", lambda: _run(args))
