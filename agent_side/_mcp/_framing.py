"""MCP's stdio framing without I/O: newline-delimited JSON-RPC in, messages or error answers out.

:class:`LineFramer` cuts received bytes into lines of at most :data:`MAX_LINE_BYTES`;
:func:`decode_line` turns one line into a JSON-RPC message, or into the error response the
sender gets instead: ``-32700`` for a line that is not JSON, ``-32600`` for JSON that is not a
JSON-RPC 2.0 message (answered with its ``id`` when one can be read, else ``null``) or a line over
the limit. A bad line never ends the connection: the next line is read as if it had not been.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import mcp_types as types
from pydantic import ValidationError

__all__ = [
    "MAX_LINE_BYTES",
    "LineFramer",
    "Oversized",
    "Rejected",
    "decode_line",
    "encode",
    "reject",
]

MAX_LINE_BYTES = 16 * 1024 * 1024
"""The longest message accepted: room for a ``write`` of a large file, bounded all the same."""


@dataclass(frozen=True, slots=True)
class Oversized:
    """A line longer than the limit was received; its bytes were dropped."""

    size: int


@dataclass(frozen=True, slots=True)
class Rejected:
    """A line that is no message: ``answer`` is the error response to send back."""

    answer: types.JSONRPCError


class LineFramer:
    """Cuts a byte stream into lines (without the ``\\n``), dropping any over ``max_line_bytes``."""

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._max = max_line_bytes
        self._buffer = bytearray()
        self._dropping = 0  # bytes dropped of the current over-long line, 0 if none

    def receive_data(self, data: bytes) -> list[bytes | Oversized]:
        """The complete lines (or :class:`Oversized` markers) that ``data`` finishes."""
        out: list[bytes | Oversized] = []
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                self._take(data[start:])
                return out
            self._take(data[start:end])
            if self._dropping:
                out.append(Oversized(self._dropping))
            elif self._buffer.strip():
                out.append(bytes(self._buffer))
            self._buffer.clear()
            self._dropping = 0
            start = end + 1

    def _take(self, piece: bytes) -> None:
        if self._dropping:
            self._dropping += len(piece)
        elif len(self._buffer) + len(piece) > self._max:
            self._dropping = len(self._buffer) + len(piece)
            self._buffer.clear()
        else:
            self._buffer += piece


def _error(request_id: types.RequestId | None, code: int, message: str) -> Rejected:
    return Rejected(
        types.JSONRPCError(
            jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)
        )
    )


def reject(marker: Oversized, limit: int = MAX_LINE_BYTES) -> Rejected:
    """The answer to a line over the limit (its id was never read)."""
    return _error(
        None,
        types.INVALID_REQUEST,
        f"message of {marker.size} bytes exceeds the {limit}-byte limit; it was not read",
    )


def decode_line(line: bytes) -> types.JSONRPCMessage | Rejected:
    """The JSON-RPC message on ``line``, or :class:`Rejected` with the answer to send back."""
    try:
        return types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError:
        pass
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return _error(None, types.PARSE_ERROR, "Parse error: the line is not valid JSON")
    request_id = value.get("id") if isinstance(value, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        request_id = None
    return _error(
        request_id,
        types.INVALID_REQUEST,
        "Invalid Request: not a JSON-RPC 2.0 message (jsonrpc, id, method, params as an object)",
    )


def encode(message: types.JSONRPCMessage) -> bytes:
    """One message as one line of the wire."""
    return message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
