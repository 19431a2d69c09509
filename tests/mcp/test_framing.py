"""The stdio framing without sockets: each vector fed whole, one byte at a time, and with
trailing data, gives the same lines; each bad line its defined answer."""

from __future__ import annotations

import pytest

from agent_side._mcp._framing import LineFramer, Oversized, Rejected, decode_line, reject

VECTORS = [
    (b'{"a":1}\n', [b'{"a":1}']),
    (b'{"a":1}\n{"b":2}\n', [b'{"a":1}', b'{"b":2}']),
    (b"\n  \n{}\n", [b"{}"]),
    (b"x" * 20 + b"\nok\n", [Oversized(20), b"ok"]),
]


def _feed(chunks: list[bytes]) -> list[bytes | Oversized]:
    framer = LineFramer(max_line_bytes=16)
    out: list[bytes | Oversized] = []
    for chunk in chunks:
        out += framer.receive_data(chunk)
    return out


@pytest.mark.parametrize("data,lines", VECTORS)
def test_lines_whole_bytewise_and_with_trailing_data(
    data: bytes, lines: list[bytes | Oversized]
) -> None:
    assert _feed([data]) == lines
    assert _feed([data[i : i + 1] for i in range(len(data))]) == lines
    assert _feed([data + b'{"partial'])[: len(lines)] == lines


@pytest.mark.parametrize(
    "line,code,request_id",
    [
        (b"nope", -32700, None),
        (b"[1]", -32600, None),
        (b'{"jsonrpc":"2.0","id":"q","method":"x","params":3}', -32600, "q"),
    ],
)
def test_bad_lines_get_defined_answers(line: bytes, code: int, request_id: object) -> None:
    decoded = decode_line(line)
    assert isinstance(decoded, Rejected)
    assert decoded.answer.error.code == code
    assert decoded.answer.id == request_id


def test_valid_line_is_a_message_and_oversized_is_answered() -> None:
    assert not isinstance(decode_line(b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'), Rejected)
    answer = reject(Oversized(99), limit=10).answer
    assert (answer.id, answer.error.code) == (None, -32600)
    assert "99 bytes" in answer.error.message
