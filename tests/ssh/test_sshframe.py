"""The SSH subsystem framing, without sockets: tables of vectors fed whole, byte by byte and
with trailing data, a decode-error table, and the state machine driven directly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opsbroker.v1 import broker_pb2 as pb
from opsbroker.v1.sshframe import (
    NEED_DATA,
    TRANSITIONS,
    Cancel,
    End,
    EndOfInput,
    Event,
    FrameConnection,
    LocalProtocolError,
    Message,
    RemoteProtocolError,
    Request,
    Role,
    State,
    bytes_field_message,
    bytes_field_offset,
    bytes_field_prefix,
)

CLIENT, SERVER = Role.CLIENT, Role.SERVER

# (sender role, event, wire hex): encode with send(), decode with next_event().
SIMPLE_CASES: list[tuple[Role, Event, str]] = [
    (CLIENT, Request("Stat"), "00000006010453746174"),
    (CLIENT, Request("ReadFile", b"\x0a\x01/"), "0000000d01085265616446696c650a012f"),
    (CLIENT, Request("a_1", b""), "000000050103615f31"),
    (CLIENT, Message(b""), "0000000102"),
    (CLIENT, Message(b"\x00\xff"), "000000030200ff"),
    (CLIENT, EndOfInput(), "0000000103"),
    (CLIENT, Cancel(), "0000000104"),
    (CLIENT, Cancel("timeout \u00e9"), "0000000b0474696d656f757420c3a9"),
    (SERVER, Message(b"abc"), "0000000402616263"),
    (SERVER, End(), "0000000105"),
    (SERVER, End(b"\x08\x02"), "00000003050802"),
]


def _state_for(sender: Role, event: Event) -> dict[Role, State]:
    """The states in which ``sender`` may send ``event``."""
    if sender is CLIENT:
        if isinstance(event, Request):
            return {CLIENT: State.IDLE, SERVER: State.IDLE}
        if isinstance(event, Cancel):
            return {CLIENT: State.DONE, SERVER: State.SEND}
        return {CLIENT: State.SEND, SERVER: State.SEND}
    return {CLIENT: State.DONE, SERVER: State.SEND}


def _conn(role: Role, states: dict[Role, State], **kwargs: int) -> FrameConnection:
    conn = FrameConnection(role, **kwargs)
    conn.states.update(states)
    return conn


def _events(conn: FrameConnection) -> Iterator[Event]:
    while True:
        event = conn.next_event()
        if event is NEED_DATA:
            return
        assert isinstance(event, Event)
        yield event


@pytest.mark.parametrize(("sender", "event", "wire"), SIMPLE_CASES, ids=repr)
def test_encode(sender: Role, event: Event, wire: str) -> None:
    conn = _conn(sender, _state_for(sender, event))
    assert conn.send(event).hex() == wire


@pytest.mark.parametrize(("sender", "event", "wire"), SIMPLE_CASES, ids=repr)
@pytest.mark.parametrize("feed", ["whole", "bytewise", "trailing"])
def test_decode(sender: Role, event: Event, wire: str, feed: str) -> None:
    receiver = SERVER if sender is CLIENT else CLIENT
    data = bytes.fromhex(wire)
    conn = _conn(receiver, _state_for(sender, event))
    got: list[Event] = []
    if feed == "whole":
        conn.receive_data(data)
        got += _events(conn)
    elif feed == "bytewise":
        for i in range(len(data)):
            assert conn.next_event() is NEED_DATA
            conn.receive_data(data[i : i + 1])
            got += _events(conn)
    else:
        conn.receive_data(data + b"\x00\x00")  # the start of a next length prefix
        got += _events(conn)
        assert conn.next_event() is NEED_DATA
    assert got == [event]


# (description, bytes the client receives from the server while the call is open, error text)
DECODE_ERRORS: list[tuple[str, str, str]] = [
    ("zero length", "00000000", "frame length 0 has no kind"),
    ("unknown kind", "0000000109", "unknown frame kind 0x09"),
    ("too large", "0001000102", "frame too large: 65537 > 65536 bytes"),
    ("request from server", "00000003010141", "can't handle Request from server"),
    ("end-of-input from server", "0000000103", "can't handle EndOfInput from server"),
    ("cancel from server", "0000000104", "can't handle Cancel from server"),
    ("end-of-input with body", "000000020300", "end-of-input frame has a 1-byte body"),
]

# (description, bytes the server receives from a fresh client, error text)
SERVER_DECODE_ERRORS: list[tuple[str, str, str]] = [
    ("empty request", "0000000101", "request frame has no method"),
    ("method runs past", "00000003010541", "request method length 5 runs past"),
    ("method not ascii", "000000030101ff", "request method is not ASCII"),
    ("method not identifier", "0000000301012f", "request method '/' is not an identifier"),
    ("message before request", "0000000102", "can't handle Message from client in state IDLE"),
    ("end before request", "0000000105", "can't handle End from client"),
    ("cancel not utf-8", "000000030101410000000204ff", "cancel reason is not UTF-8"),
    ("two requests", "0000000301014100000003010141", "can't handle Request"),
]


@pytest.mark.parametrize(("name", "wire", "error"), DECODE_ERRORS, ids=lambda v: str(v))
def test_decode_errors_client(name: str, wire: str, error: str) -> None:
    conn = _conn(CLIENT, {CLIENT: State.DONE, SERVER: State.SEND}, max_frame_size=65536)
    conn.receive_data(bytes.fromhex(wire))
    with pytest.raises(RemoteProtocolError, match=error.replace("(", r"\(")):
        list(_events(conn))
    assert conn.states == {CLIENT: State.ERROR, SERVER: State.ERROR}
    with pytest.raises(RemoteProtocolError):
        conn.next_event()


@pytest.mark.parametrize(("name", "wire", "error"), SERVER_DECODE_ERRORS, ids=lambda v: str(v))
@pytest.mark.parametrize("bytewise", [False, True])
def test_decode_errors_server(name: str, wire: str, error: str, bytewise: bool) -> None:
    conn = FrameConnection(SERVER)
    data = bytes.fromhex(wire)
    with pytest.raises(RemoteProtocolError, match=error):
        for chunk in [data[i : i + 1] for i in range(len(data))] if bytewise else [data]:
            conn.receive_data(chunk)
            list(_events(conn))
    assert conn.our_state is State.ERROR


def test_oversized_length_is_refused_before_the_body_arrives() -> None:
    conn = FrameConnection(SERVER, max_frame_size=16)
    conn.receive_data(b"\xff\xff\xff\xff")
    with pytest.raises(RemoteProtocolError, match="frame too large: 4294967295 > 16 bytes"):
        conn.next_event()


def test_send_refuses_oversized_frame() -> None:
    conn = FrameConnection(CLIENT, max_frame_size=16)
    with pytest.raises(LocalProtocolError, match="frame too large: 22 > 16 bytes"):
        conn.send(Request("A", b"x" * 19))
    assert conn.our_state is State.ERROR


def test_eof() -> None:
    server = FrameConnection(SERVER)
    server.receive_data(b"")
    assert server.next_event() is NEED_DATA
    assert server.closed_by_peer

    mid_frame = FrameConnection(SERVER)
    mid_frame.receive_data(b"\x00\x00\x00\x05\x01")
    mid_frame.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="in the middle of a frame"):
        mid_frame.next_event()

    mid_call = FrameConnection(SERVER)
    mid_call.receive_data(FrameConnection(CLIENT).send(Request("A")))
    mid_call.receive_data(b"")
    assert isinstance(mid_call.next_event(), Request)
    with pytest.raises(RemoteProtocolError, match="in the middle of a call"):
        mid_call.next_event()

    with pytest.raises(RuntimeError, match="after EOF"):
        server.receive_data(b"x")


# (event, the LocalProtocolError its constructor raises)
INVALID_EVENTS: list[tuple[object, str]] = [
    (lambda: Request(""), "non-empty"),
    (lambda: Request("a" * 65), "request method too long: 65 > 64"),
    (lambda: Request("Read/File"), "not an identifier"),
    (lambda: Request("R\u00e9ad"), "not an identifier"),
    (lambda: Request("Read", "text"), "message must be bytes, got str"),
    (lambda: Message(bytearray(b"x")), "message must be bytes, got bytearray"),
    (lambda: End("boom"), "error must be bytes"),
    (lambda: Cancel(b"x"), "cancel reason must be a string"),
]


@pytest.mark.parametrize(("make", "error"), INVALID_EVENTS, ids=lambda v: str(v)[:20])
def test_invalid_events_cannot_exist(make: object, error: str) -> None:
    assert callable(make)
    with pytest.raises(LocalProtocolError, match=error):
        make()


def test_events_are_frozen_values() -> None:
    event = Request("Stat", b"x")
    with pytest.raises(AttributeError):
        event.method = "Other"  # type: ignore[misc]
    assert not hasattr(event, "__dict__")
    assert Request("Stat", b"x") == event
    assert End().ok and not End(b"x").ok


class FramePair:
    """A client and a server connection whose ``send`` output feeds the other's ``receive_data``."""

    def __init__(self) -> None:
        self.client = FrameConnection(CLIENT)
        self.server = FrameConnection(SERVER)

    def send(self, role: Role, *events: Event) -> None:
        sender, receiver = (
            (self.client, self.server) if role is CLIENT else (self.server, self.client)
        )
        data = b"".join(sender.send(event) for event in events)
        receiver.receive_data(data)
        assert list(_events(receiver)) == list(events)
        assert sender.states == receiver.states


def test_a_streamed_call_then_reuse_of_the_channel() -> None:
    pair = FramePair()
    pair.send(CLIENT, Request("WriteFile", b"head"), Message(b"chunk1"), Message(b"chunk2"))
    assert pair.client.states == {CLIENT: State.SEND, SERVER: State.SEND}
    pair.send(CLIENT, EndOfInput())
    pair.send(SERVER, Message(b"progress"))
    with pytest.raises(LocalProtocolError, match="not in a reusable state"):
        pair.client.start_next_call()
    pair.send(SERVER, End())
    assert pair.client.states == {CLIENT: State.DONE, SERVER: State.DONE}
    for conn in (pair.client, pair.server):
        conn.start_next_call()
    pair.send(CLIENT, Request("Stat", b"/"), EndOfInput())
    pair.send(SERVER, End(b"not_found"))


def test_cancel_while_sending_and_after_end_of_input() -> None:
    pair = FramePair()
    pair.send(CLIENT, Request("Run"), EndOfInput(), Cancel("abort"), Cancel())
    pair.send(SERVER, Message(b"out"), End(b"aborted"))
    pair2 = FramePair()
    pair2.send(CLIENT, Request("WriteFile"), Message(b"x"), Cancel())
    with pytest.raises(LocalProtocolError, match="can't handle Message from client in state DONE"):
        pair2.client.send(Message(b"late"))


@pytest.mark.parametrize(
    ("role", "states", "event"),
    [
        (SERVER, {CLIENT: State.IDLE, SERVER: State.IDLE}, Message(b"x")),
        (SERVER, {CLIENT: State.IDLE, SERVER: State.IDLE}, End()),
        (SERVER, {CLIENT: State.DONE, SERVER: State.DONE}, Message(b"x")),
        (SERVER, {CLIENT: State.SEND, SERVER: State.SEND}, Request("A")),
        (CLIENT, {CLIENT: State.SEND, SERVER: State.SEND}, Request("A")),
        (CLIENT, {CLIENT: State.DONE, SERVER: State.SEND}, EndOfInput()),
        (CLIENT, {CLIENT: State.IDLE, SERVER: State.IDLE}, Cancel()),
        (CLIENT, {CLIENT: State.SEND, SERVER: State.SEND}, End()),
    ],
    ids=repr,
)
def test_send_refuses_events_not_in_the_table(
    role: Role, states: dict[Role, State], event: Event
) -> None:
    conn = _conn(role, states)
    with pytest.raises(LocalProtocolError, match=f"can't handle {type(event).__name__}"):
        conn.send(event)
    assert conn.states == {CLIENT: State.ERROR, SERVER: State.ERROR}
    with pytest.raises(LocalProtocolError, match="in state ERROR"):
        conn.send(Cancel())


def test_the_table_covers_every_state_and_kind() -> None:
    for role in Role:
        assert set(TRANSITIONS[role]) == {State.IDLE, State.SEND, State.DONE}
    assert TRANSITIONS[SERVER][State.IDLE] == {}


def test_max_frame_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_frame_size must be >= 1, got 0"):
        FrameConnection(CLIENT, max_frame_size=0)


@pytest.mark.parametrize("piece", [1000, 65536, 262144 + 7])
def test_large_messages_in_any_pieces_arrive_intact(piece: int) -> None:
    """Bodies are cut out of the received pieces, however many a frame spans (and whatever
    piece a frame starts or ends in), into bytes of their own."""
    states = {CLIENT: State.DONE, SERVER: State.SEND}
    sender = _conn(SERVER, states)
    receiver = _conn(CLIENT, states)
    bodies = [bytes([n]) * (256 * 1024 + n) for n in range(4)]
    wire = b"".join(sender.send(Message(body)) for body in bodies) + sender.send(End())
    got: list[Event] = []
    for start in range(0, len(wire), piece):
        receiver.receive_data(wire[start : start + piece])
        got += _events(receiver)
    assert got == [*(Message(body) for body in bodies), End()]
    assert isinstance(got[0], Message) and type(got[0].message) is bytes


def test_frames_are_cut_from_the_received_bytes_in_order() -> None:
    """Whole frames come out of the bytes as received; a frame's start left over is gathered
    with what the next receive brings, even when the caller did not drain in between."""
    states = {CLIENT: State.DONE, SERVER: State.SEND}
    sender = _conn(SERVER, states)
    bodies = [bytes([n]) * (1000 * n + 1) for n in range(6)]
    wire = b"".join(sender.send(Message(body)) for body in bodies) + sender.send(End())
    receiver = _conn(CLIENT, states)
    cut = (5 + 1) + (5 + 1001) + 3  # inside the third frame
    receiver.receive_data(wire[:cut])
    receiver.receive_data(wire[cut : cut + 5])  # not drained: two frames wait before this
    receiver.receive_data(wire[cut + 5 :])
    assert not receiver.closed_by_peer
    assert list(_events(receiver)) == [*(Message(body) for body in bodies), End()]
    receiver.receive_data(b"")
    assert receiver.next_event() is NEED_DATA and receiver.closed_by_peer


def test_every_cut_of_the_received_bytes_gives_the_same_frames() -> None:
    """Views of the received bytes, cut anywhere (inside a length, between a length and its
    kind, inside a body), and fed in three pieces, give the frames the whole bytes give."""
    states = {CLIENT: State.DONE, SERVER: State.SEND}
    sender = _conn(SERVER, states)
    bodies = [b"", b"a", bytes(range(256)) * 3, b"\x00\x01"]
    wire = b"".join(sender.send(Message(body)) for body in bodies) + sender.send(End(b"\x08"))
    expected = [*(Message(body) for body in bodies), End(b"\x08")]
    view = memoryview(wire)
    for first in range(1, len(wire) - 3):
        second = first + 3
        receiver = _conn(CLIENT, states)
        got: list[Event] = []
        for piece in (view[:first], view[first:second], view[second:]):
            receiver.receive_data(piece)
            got += _events(receiver)
        assert got == expected, first
        assert all(type(event.message) is bytes for event in got if isinstance(event, Message))
        receiver.receive_data(b"")
        assert receiver.closed_by_peer


def test_received_bytes_are_not_aliased() -> None:
    """A mutable buffer handed to receive_data may change afterwards: frames keep what came."""
    conn = _conn(CLIENT, {CLIENT: State.DONE, SERVER: State.SEND})
    data = bytearray.fromhex("0000000402616263000000")  # a frame, then a next one's start
    conn.receive_data(data)  # type: ignore[arg-type]
    data[5:] = b"xyz\x00\x00\x00"
    assert conn.next_event() == Message(b"abc")
    conn.receive_data(b"\x02\x02z")
    assert conn.next_event() == Message(b"z")


def test_eof_inside_a_frame_left_in_the_received_bytes() -> None:
    conn = _conn(CLIENT, {CLIENT: State.DONE, SERVER: State.SEND})
    conn.receive_data(bytes.fromhex("000000040261626300000004026162"))
    assert conn.next_event() == Message(b"abc")
    assert conn.next_event() is NEED_DATA
    conn.receive_data(b"")
    assert not conn.closed_by_peer
    with pytest.raises(RemoteProtocolError, match=r"in the middle of a frame \(7 bytes\)"):
        conn.next_event()


def test_send_message_is_the_frame_of_the_joined_pieces_uncopied() -> None:
    states = {CLIENT: State.SEND, SERVER: State.SEND}
    data = bytes(range(256)) * 40
    parts: list[bytes | memoryview] = [b"\x12\x80\x50", memoryview(data)[:5000], data[5000:]]
    conn = _conn(CLIENT, states)
    frame = conn.send_message(parts)
    assert b"".join(frame) == _conn(CLIENT, states).send(Message(b"".join(parts)))
    assert all(a is b for a, b in zip(frame[1:], parts, strict=True))  # the pieces themselves
    assert conn.states == states
    assert conn.send_message([]) == [bytes.fromhex("0000000102")]


def test_send_message_refuses_what_send_refuses() -> None:
    idle = FrameConnection(CLIENT)
    with pytest.raises(LocalProtocolError, match="can't handle Message from client in state IDLE"):
        idle.send_message([b"x"])
    assert idle.our_state is State.ERROR
    small = _conn(CLIENT, {CLIENT: State.SEND, SERVER: State.SEND}, max_frame_size=16)
    with pytest.raises(LocalProtocolError, match="frame too large: 17 > 16 bytes"):
        small.send_message([b"x" * 10, memoryview(b"y" * 6)])
    assert small.our_state is State.ERROR


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16383, 16384, 262135, 1 << 21])
def test_bytes_field_prefix_is_protobufs_encoding(size: int) -> None:
    value = b"v" * size
    output = pb.ExecEvent(output=value).SerializeToString()  # a oneof: set even when empty
    assert bytes_field_prefix(1, size) + value == output
    assert bytes_field_offset(output, 1) == len(output) - size
    if size:
        data = pb.WriteFileRequest(data=value).SerializeToString()
        assert bytes_field_prefix(2, size) + value == data
        assert bytes_field_offset(data, 2) == len(data) - size
        assert bytes_field_offset(data, 1) is None


# (description, serialized message): not exactly one bytes field 1, so parsed as usual
OTHER_MESSAGES: list[tuple[str, bytes]] = [
    ("empty", b""),
    ("exit event", pb.ExecEvent(exit=pb.ExecExit(exit_code=3)).SerializeToString()),
    ("another field after it", pb.ExecEvent(output=b"ab").SerializeToString() + b"\x10\x01"),
    ("length longer than the rest", bytes.fromhex("0a0561")),
    ("length shorter than the rest", bytes.fromhex("0a016162")),
    ("tag only", bytes.fromhex("0a")),
    ("length not finished", bytes.fromhex("0a80")),
    ("length over five bytes", bytes.fromhex("0a8080808080800061")),
    ("another field", bytes.fromhex("1201610a0162")),
]


@pytest.mark.parametrize(("name", "message"), OTHER_MESSAGES, ids=lambda v: str(v)[:30])
def test_bytes_field_offset_refuses_other_messages(name: str, message: bytes) -> None:
    assert bytes_field_offset(message, 1) is None


def test_bytes_field_message_is_the_message_of_the_joined_parts() -> None:
    data = bytes(range(256)) * 600
    parts = [data[:10], memoryview(data)[10:150_000], data[150_000:]]
    assert bytes_field_message(1, parts) == pb.FrameBytes(data=data).SerializeToString()
    assert bytes_field_message(1, []) == pb.ExecEvent(output=b"").SerializeToString()


def test_bytes_field_prefix_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="field number must be in 1"):
        bytes_field_prefix(0, 1)
    with pytest.raises(ValueError, match="size must be >= 0, got -1"):
        bytes_field_prefix(1, -1)
