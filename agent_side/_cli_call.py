"""``opsbroker call URL TOOL [JSON]``: one tool call through the full loop, its result printed.

The call goes through :func:`agent_side.loop.execute_tool_calls` like a model's: argument
preparation, validation (with its coercions and error texts), execution, the result message. The
output is the model-visible text of the result (``--json``: the whole result message), a running
command's output written as it arrives. Exit
status 0 when the result is a success, 1 when it is an error; see :mod:`agent_side._cli`.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

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
from ._loop import execute_tool_calls
from ._messages import (
    AgentEvent,
    AssistantMessage,
    ImageContent,
    ToolCall,
    ToolExecutionUpdateEvent,
    ToolResultMessage,
)

__all__ = ["add_parser", "model_visible_text", "run"]

CALL_ID = "call_cli"
"""The id of the one tool call (the result message's ``toolCallId``)."""


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "call",
        help="run one tool call against a backend and print its result",
        description=(
            "Run one built-in tool (read, write, edit, ls, find, grep, bash, powershell) through "
            "the full tool loop against the backend at URL, and print the model-visible result. "
            "Exit status: 0 success, 1 the result is an error, 2 bad input, 3 backend unreachable "
            "or credentials refused."
        ),
        epilog='example: opsbroker call grpc://127.0.0.1:7443 read \'{"path": "README.md"}\'',
    )
    one_line_usage_errors(parser, "call")
    add_backend_arguments(parser)
    parser.add_argument("tool", metavar="TOOL", help="the tool name, e.g. read")
    parser.add_argument(
        "arguments",
        metavar="JSON",
        nargs="?",
        default="{}",
        help="the tool's arguments as a JSON object, '-' for stdin (default: {})",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the whole result message as JSON"
    )
    parser.set_defaults(handler=run)


def model_visible_text(message: ToolResultMessage[Any]) -> str:
    """The result as the model reads it: the text blocks, and a placeholder line per image."""
    parts = []
    for block in message.content:
        if isinstance(block, ImageContent):
            parts.append(f"[image {block.mime_type}, {len(block.data)} base64 characters]")
        else:
            parts.append(block.text)
    return "\n".join(parts)


def _arguments(text: str) -> dict[str, Any]:
    source = read_input("-", "stdin") if text == "-" else text
    value = read_json(source, "the tool arguments")
    if not isinstance(value, dict):
        raise CliError(
            f'the tool arguments must be a JSON object such as \'{{"path": "a.txt"}}\', '
            f"not {type(value).__name__}"
        )
    return value


async def _call(args: argparse.Namespace) -> int:
    from .tools import ALL_TOOL_NAMES

    if args.tool not in ALL_TOOL_NAMES:
        raise CliError(f"unknown tool {args.tool!r}; the tools are {', '.join(ALL_TOOL_NAMES)}")
    arguments = _arguments(args.arguments)
    message = AssistantMessage(
        content=[ToolCall(id=CALL_ID, name=args.tool, arguments=arguments)],
        stop_reason="toolUse",
    )
    stream = None if args.json else StreamedText()
    async with open_tools(args) as (_backend, tools):
        batch = await execute_tool_calls(tools, message, emit=stream)
    (result,) = batch.messages
    if stream is None:
        write_out(json.dumps(result.to_wire(), ensure_ascii=False) + "\n")
    else:
        stream.finish(model_visible_text(result))
    return EXIT_TOOL_ERROR if result.is_error else EXIT_OK


class StreamedText:
    """Prints a running tool's output as its updates arrive, then what its result adds.

    A tool's updates (``bash``: the output so far, its last 2000 lines or 50 KB) each extend
    the one before; only the new text is written. At the end, the model-visible result usually
    extends the last update (the same output, then a notice or the exit status), so stdout ends
    up holding exactly the text ``--json`` would show, written as it came.
    """

    ANCHOR_CHARS = 4096  # where a rolled window resumes: the end of what was printed

    def __init__(self) -> None:
        self._shown = ""

    def __call__(self, event: AgentEvent) -> None:
        if isinstance(event, ToolExecutionUpdateEvent):
            text = "\n".join(getattr(b, "text", "") for b in event.partial_result.content)
            if text:
                self._show(text)

    def finish(self, text: str) -> None:
        """Write what ``text`` (the result) adds to the output shown, ending with a newline."""
        self._show(text)
        if self._shown and not self._shown.endswith("\n"):
            write_out("\n")

    def _show(self, text: str) -> None:
        if text.startswith(self._shown):
            new = text[len(self._shown) :]
        else:  # the window rolled past the start: resume after the last text printed
            anchor = self._shown[-self.ANCHOR_CHARS :]
            at = text.rfind(anchor)
            new = text[at + len(anchor) :] if at >= 0 else "\n" + text
        if new:
            write_out(new)
        self._shown = text


def run(args: argparse.Namespace) -> int:
    return run_command("call", lambda: _call(args))
