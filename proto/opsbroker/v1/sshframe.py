"""The framing of the ``opsbroker`` SSH subsystem, sans I/O: bytes in, events out.

This module contains no networking code at all. A :class:`FrameConnection` is fed the bytes that
arrive on one SSH channel (:meth:`FrameConnection.receive_data`), hands back the events they
carry (:meth:`FrameConnection.next_event`), and turns the events its side wants to send into
bytes (:meth:`FrameConnection.send`); the caller owns the channel. Both the broker's subsystem
and the client backend drive one ``FrameConnection`` per channel.

Wire format. Every frame is::

    uint32 length (big-endian)   number of bytes that follow: 1 + len(body)
    uint8  kind                  REQUEST, MESSAGE, END_OF_INPUT, CANCEL or END
    body                         depends on the kind (below)

==============  =========  =============================================================
kind            direction  body
==============  =========  =============================================================
0x01 REQUEST    client     uint8 method length, method (ASCII), first request message
0x02 MESSAGE    both       one more message of the call's stream (client: request side,
                           server: response side)
0x03 END_OF_INPUT  client  empty; the client sends no more messages for this call
0x04 CANCEL     client     reason (UTF-8, may be empty); the server stops the call and
                           still answers with END
0x05 END        server     the call's final status: empty for success, else an error
                           detail message
==============  =========  =============================================================

Messages are opaque here: the front-end and the client put serialized protobuf messages (the
same messages as the gRPC service) in them. One channel carries one call at a time; after both
sides are ``DONE``, :meth:`FrameConnection.start_next_call` lets the channel carry another.
Closing the channel is the other way to cancel a call.

Bulk data (command output, file content) crosses in messages whose only field is one ``bytes``
field. :meth:`FrameConnection.send_message` frames such a message from its pieces without
copying them (:func:`bytes_field_prefix` gives the field's tag and length), and
:func:`bytes_field_offset` finds the field's value in a received message without parsing it:
neither builds the message.
Received bytes are held as they came; each frame's body is cut out of them with one copy, however
many receives it spans.
"""

from __future__ import annotations

import collections
import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Final

from .codec import MAX_MESSAGE_BYTES

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "HEADER_BYTES",
    "NEED_DATA",
    "SUBSYSTEM",
    "TRANSITIONS",
    "Cancel",
    "End",
    "EndOfInput",
    "Event",
    "FrameConnection",
    "LocalProtocolError",
    "Message",
    "ProtocolError",
    "RemoteProtocolError",
    "Request",
    "Role",
    "State",
    "bytes_field_message",
    "bytes_field_offset",
    "bytes_field_prefix",
]

SUBSYSTEM: Final = "opsbroker"
"""The SSH subsystem name a client requests and the broker serves."""

DEFAULT_MAX_FRAME_SIZE: Final = MAX_MESSAGE_BYTES + 1024
"""Largest ``length`` accepted or sent: the largest message (the gRPC transport's limit too: a
search match carries a whole line, however long) plus headroom."""

MAX_METHOD_LENGTH: Final = 64
"""Longest method name: names are short identifiers, a longer one is a corrupt frame."""

_HEADER = struct.Struct(">IB")
_LENGTH = struct.Struct(">I")
_LENGTH_BYTES: Final = _LENGTH.size

HEADER_BYTES: Final = _HEADER.size
"""Bytes a frame adds before its body (length and kind)."""


class ProtocolError(Exception):
    """The framing was violated. ``LocalProtocolError``: by us; ``RemoteProtocolError``: the peer."""


class LocalProtocolError(ProtocolError):
    """We tried to do something the protocol forbids (a bug in the caller)."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol forbids; the channel should be closed."""


# --- events -------------------------------------------------------------------------------------


class Event:
    """Base of the frame events. Don't subclass these outside this module."""

    __slots__ = ()
    kind: ClassVar[int]


@dataclass(frozen=True, slots=True)
class Request(Event):
    """Opens a call (client to server).

    Args:
        method: the name of the call, e.g. ``"ReadFile"``: ASCII letters, digits and ``_``.
        message: the first (for unary calls, the only) serialized request message.
    """

    kind: ClassVar[int] = 0x01
    method: str
    message: bytes = b""

    def __post_init__(self) -> None:
        _check_bytes("message", self.message)
        if not isinstance(self.method, str) or not self.method:
            raise LocalProtocolError("request method must be a non-empty string")
        if len(self.method) > MAX_METHOD_LENGTH:
            raise LocalProtocolError(
                f"request method too long: {len(self.method)} > {MAX_METHOD_LENGTH} characters"
            )
        if not (self.method.isascii() and self.method.replace("_", "a").isalnum()):
            raise LocalProtocolError(f"request method {self.method!r} is not an identifier")


@dataclass(frozen=True, slots=True)
class Message(Event):
    """One more serialized message in the call's stream (either direction)."""

    kind: ClassVar[int] = 0x02
    message: bytes

    def __post_init__(self) -> None:
        _check_bytes("message", self.message)


@dataclass(frozen=True, slots=True)
class EndOfInput(Event):
    """The client will send no more messages for this call (a half-close)."""

    kind: ClassVar[int] = 0x03


@dataclass(frozen=True, slots=True)
class Cancel(Event):
    """The client asks the server to stop the call; the server still ends it with :class:`End`."""

    kind: ClassVar[int] = 0x04
    reason: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str):
            raise LocalProtocolError("cancel reason must be a string")


@dataclass(frozen=True, slots=True)
class End(Event):
    """The call's final status (server to client): ``error`` empty on success, else the
    serialized error detail message."""

    kind: ClassVar[int] = 0x05
    error: bytes = b""

    def __post_init__(self) -> None:
        _check_bytes("error", self.error)

    @property
    def ok(self) -> bool:
        return not self.error


def _check_bytes(name: str, value: object) -> None:
    if not isinstance(value, bytes):
        raise LocalProtocolError(f"{name} must be bytes, got {type(value).__name__}")


class _NeedData:
    """Sentinel: :meth:`FrameConnection.next_event` needs more bytes before it can say more."""

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData()


# --- the state machine --------------------------------------------------------------------------
#
# Rule 1: everything that decides which event may come next lives in TRANSITIONS and
#         FrameConnection._process; nothing else changes a state.
# Rule 2: the table does not know which side we are; it is indexed by the side that sends.
#
# Theory of operation: each side has its own state. The client opens a call with Request
# (IDLE -> SEND), may stream Messages, and finishes its half with EndOfInput or Cancel (-> DONE);
# Cancel is also allowed once it is DONE (it changes nothing then). The server may only speak
# once the client has left IDLE (the state-triggered rule in _process), streams Messages, and
# ends the call with End (-> DONE). When both sides are DONE the call is over and
# start_next_call() returns both to IDLE. Any exception moves the connection to ERROR for good.


class Role(enum.Enum):
    CLIENT = "client"
    SERVER = "server"

    # Members are singletons compared by identity: hash them as objects, in C (``Enum``
    # hashes the name in Python, and the state machine looks them up on every frame).
    __hash__ = object.__hash__


class State(enum.Enum):
    IDLE = "IDLE"
    SEND = "SEND"
    DONE = "DONE"
    ERROR = "ERROR"

    __hash__ = object.__hash__  # as Role's

    def __str__(self) -> str:
        return self.value


TRANSITIONS: Final[dict[Role, dict[State, dict[type[Event], State]]]] = {
    Role.CLIENT: {
        State.IDLE: {Request: State.SEND},
        State.SEND: {Message: State.SEND, EndOfInput: State.DONE, Cancel: State.DONE},
        State.DONE: {Cancel: State.DONE},
    },
    Role.SERVER: {
        State.IDLE: {},
        State.SEND: {Message: State.SEND, End: State.DONE},
        State.DONE: {},
    },
}

_KINDS: Final[dict[int, type[Event]]] = {
    cls.kind: cls for cls in (Request, Message, EndOfInput, Cancel, End)
}


def _encode_body(event: Event) -> bytes:
    if isinstance(event, Request):
        method = event.method.encode("ascii")
        return bytes([len(method)]) + method + event.message
    if isinstance(event, Message):
        return event.message
    if isinstance(event, Cancel):
        return event.reason.encode("utf-8")
    if isinstance(event, End):
        return event.error
    return b""


def _decode_body(kind: int, body: bytes) -> Event:
    """Build the event of one frame; every failure is a LocalProtocolError (re-raised as remote)."""
    cls = _KINDS.get(kind)
    if cls is None:
        raise LocalProtocolError(f"unknown frame kind 0x{kind:02x}")
    if cls is Request:
        if not body:
            raise LocalProtocolError("request frame has no method")
        size = body[0]
        if len(body) < 1 + size:
            raise LocalProtocolError(
                f"request method length {size} runs past the frame ({len(body) - 1} bytes left)"
            )
        try:
            method = body[1 : 1 + size].decode("ascii")
        except UnicodeDecodeError:
            raise LocalProtocolError("request method is not ASCII") from None
        return Request(method, body[1 + size :])
    if cls is Message:
        return Message(body)
    if cls is EndOfInput:
        if body:
            raise LocalProtocolError(f"end-of-input frame has a {len(body)}-byte body")
        return EndOfInput()
    if cls is Cancel:
        try:
            return Cancel(body.decode("utf-8"))
        except UnicodeDecodeError:
            raise LocalProtocolError("cancel reason is not UTF-8") from None
    return End(body)


# --- messages of one bytes field -----------------------------------------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def bytes_field_prefix(field: int, size: int) -> bytes:
    """The protobuf tag and length of a ``bytes`` field ``field`` holding ``size`` bytes: with
    the value after it, the serialized message whose only field that is (as
    ``SerializeToString`` writes it)."""
    if not 0 < field < 1 << 29:
        raise ValueError(f"field number must be in 1..{(1 << 29) - 1}, got {field}")
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    return _varint(field << 3 | 2) + _varint(size)


def bytes_field_message(field: int, parts: Sequence[bytes | memoryview]) -> bytes:
    """The serialized message whose only field is ``bytes`` field ``field`` holding
    ``b"".join(parts)``, built with one copy of the parts (a ``FrameBytes`` of queued frames)."""
    return b"".join([bytes_field_prefix(field, sum(map(len, parts))), *parts])


def bytes_field_offset(message: bytes, field: int) -> int | None:
    """Where the value starts if the serialized ``message`` is exactly one ``bytes`` field
    ``field`` (tag, length, then the value to the end); ``None`` for any other message, which
    the caller parses as usual."""
    tag = _varint(field << 3 | 2)
    if not message.startswith(tag):
        return None
    size = shift = 0
    for index in range(len(tag), min(len(tag) + 5, len(message))):  # a length is <= 5 bytes
        byte = message[index]
        size |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            start = index + 1
            return start if size == len(message) - start else None
    return None


_MESSAGE_EVENT: Final = Message(b"")  # what send_message() moves the state machine with


class FrameConnection:
    """One side of one channel of the ``opsbroker`` subsystem.

    Args:
        role: :attr:`Role.CLIENT` or :attr:`Role.SERVER`: which side we are.
        max_frame_size: the largest frame (``length`` field) accepted from the peer or sent by
            us; a bound on what a peer can make us buffer.
    """

    def __init__(self, role: Role, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < 1:
            raise ValueError(f"max_frame_size must be >= 1, got {max_frame_size}")
        self.our_role = role
        self.their_role = Role.SERVER if role is Role.CLIENT else Role.CLIENT
        self.max_frame_size = max_frame_size
        self.states: dict[Role, State] = {Role.CLIENT: State.IDLE, Role.SERVER: State.IDLE}
        # What has been received and not yet cut into events, as received (never copied): the
        # first part from _offset on, then the others whole; _size bytes in all.
        self._parts: collections.deque[bytes | memoryview] = collections.deque()
        self._offset = 0
        self._size = 0
        self._eof = False

    @property
    def our_state(self) -> State:
        return self.states[self.our_role]

    @property
    def their_state(self) -> State:
        return self.states[self.their_role]

    def _process(self, role: Role, event: Event) -> None:
        state = self.states[role]
        if state is State.ERROR:
            raise LocalProtocolError(f"can't handle {type(event).__name__} in state {state}")
        new_state = TRANSITIONS[role][state].get(type(event))
        if new_state is None:
            raise LocalProtocolError(
                f"can't handle {type(event).__name__} from {role.value} in state {state}"
            )
        self.states[role] = new_state
        # State-triggered: the server may answer once the client has opened a call.
        if role is Role.CLIENT and state is State.IDLE:
            self.states[Role.SERVER] = State.SEND

    def _fail(self) -> None:
        self.states[Role.CLIENT] = self.states[Role.SERVER] = State.ERROR

    def send(self, event: Event) -> bytes:
        """Convert ``event`` (sent by our side) into bytes to write on the channel.

        Raises:
            LocalProtocolError: the event is not allowed in the current state, or its frame
                would exceed ``max_frame_size``. The connection is then in ``ERROR``.
        """
        try:
            self._process(self.our_role, event)
            body = _encode_body(event)
            length = 1 + len(body)
            if length > self.max_frame_size:
                raise LocalProtocolError(f"frame too large: {length} > {self.max_frame_size} bytes")
        except LocalProtocolError:
            self._fail()
            raise
        return _HEADER.pack(length, event.kind) + body

    def send_message(self, parts: Sequence[bytes | memoryview]) -> list[bytes | memoryview]:
        """The :class:`Message` frame whose message is ``parts`` joined, as parts to write in
        order: its header, then ``parts`` themselves, uncopied. The carrier joins them once
        with what else it sends (``send(Message(b"".join(parts)))`` copies them twice).

        Raises:
            LocalProtocolError: as :meth:`send`.
        """
        length = 1 + sum(map(len, parts))
        try:
            self._process(self.our_role, _MESSAGE_EVENT)
            if length > self.max_frame_size:
                raise LocalProtocolError(f"frame too large: {length} > {self.max_frame_size} bytes")
        except LocalProtocolError:
            self._fail()
            raise
        return [_HEADER.pack(length, Message.kind), *parts]

    def receive_data(self, data: bytes | memoryview) -> None:
        """Take bytes received from the peer; ``b""`` means the peer closed its side (EOF).

        The bytes are kept as they are (not copied: a ``memoryview`` must be of bytes nobody
        changes) until :meth:`next_event` cuts the frames out of them, each body with one copy.
        """
        if data:
            if self._eof:
                raise RuntimeError("received data after EOF")
            if not isinstance(data, (bytes, memoryview)):
                data = bytes(data)
            self._parts.append(data)
            self._size += len(data)
        else:
            self._eof = True

    def next_event(self) -> Event | _NeedData:
        """Parse the next event sent by the peer.

        Returns:
            an :class:`Event`, or :data:`NEED_DATA` when the buffer holds no complete frame.

        Raises:
            RemoteProtocolError: the peer broke the protocol (bad frame, wrong state, frame
                larger than ``max_frame_size``, or EOF in the middle of a frame or a call).
                The connection is then in ``ERROR``. Any other exception is a bug.
        """
        if self.their_state is State.ERROR:
            raise RemoteProtocolError("can't receive data when peer state is ERROR")
        try:
            event = self._extract_event()
            if event is not NEED_DATA:
                assert isinstance(event, Event)
                self._process(self.their_role, event)
            return event
        except LocalProtocolError as exc:
            self._fail()
            raise RemoteProtocolError(str(exc)) from exc

    def _extract_event(self) -> Event | _NeedData:
        size = self._size
        if size < _LENGTH_BYTES:
            return self._need_data(size)
        first, offset = self._parts[0], self._offset
        held = len(first) - offset  # what the first part still holds
        if held >= _LENGTH_BYTES:
            (length,) = _LENGTH.unpack_from(first, offset)
        else:  # a length split across receives
            (length,) = _LENGTH.unpack(self._take(_LENGTH_BYTES, peek=True))
        self._check_length(length)
        end = _LENGTH_BYTES + length
        if size < end:
            return self._need_data(size)
        if held >= end:  # the common case: the whole frame in the first part, cut out at once
            kind = first[offset + _LENGTH_BYTES]
            body = bytes(first[offset + HEADER_BYTES : offset + end])
            self._consume(end)
            return _decode_body(kind, body)
        if held >= HEADER_BYTES:
            kind = first[offset + _LENGTH_BYTES]
            self._consume(HEADER_BYTES)
        else:
            kind = self._take(HEADER_BYTES)[_LENGTH_BYTES]
        return _decode_body(kind, self._take(length - 1))

    def _take(self, count: int, *, peek: bool = False) -> bytes:
        """The next ``count`` received bytes (at most that many are held), in one copy; with
        ``peek`` they stay."""
        if not count:
            return b""
        first, offset = self._parts[0], self._offset
        if len(first) - offset >= count:  # the common case: all in the first part
            taken = bytes(first[offset : offset + count])
        else:
            pieces: list[memoryview] = []
            need = count
            for part in self._parts:
                pieces.append(memoryview(part)[offset : offset + need])
                need -= len(pieces[-1])
                offset = 0
                if not need:
                    break
            taken = b"".join(pieces)
        if not peek:
            self._consume(count)
        return taken

    def _consume(self, count: int) -> None:
        """Drop the next ``count`` bytes (parts wholly consumed are released)."""
        parts = self._parts
        self._size -= count
        count += self._offset
        while parts and count >= len(parts[0]):
            count -= len(parts.popleft())
        self._offset = count

    def _check_length(self, length: int) -> None:
        if length > self.max_frame_size:
            raise LocalProtocolError(f"frame too large: {length} > {self.max_frame_size} bytes")
        if length == 0:
            raise LocalProtocolError("frame length 0 has no kind")

    def _need_data(self, pending: int) -> _NeedData:
        """NEED_DATA with ``pending`` bytes of an incomplete frame held; at EOF, the error."""
        if self._eof:
            if pending:
                raise LocalProtocolError(
                    f"peer closed the channel in the middle of a frame ({pending} bytes)"
                )
            if self.their_state is State.SEND:
                raise LocalProtocolError("peer closed the channel in the middle of a call")
        return NEED_DATA

    @property
    def closed_by_peer(self) -> bool:
        """The peer sent EOF and every frame before it has been consumed."""
        return self._eof and not self._size

    def start_next_call(self) -> None:
        """Return both sides to ``IDLE`` after a call is over (both ``DONE``), to reuse the
        channel for another call.

        Raises:
            LocalProtocolError: the current call is not over.
        """
        if self.states[Role.CLIENT] is not State.DONE or self.states[Role.SERVER] is not State.DONE:
            raise LocalProtocolError(
                f"not in a reusable state: client {self.states[Role.CLIENT]}, "
                f"server {self.states[Role.SERVER]}"
            )
        self.states[Role.CLIENT] = self.states[Role.SERVER] = State.IDLE
