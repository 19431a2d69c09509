"""The ``file`` part of a ``multipart/form-data`` body, streamed, without I/O.

A PUT may carry the file as the ``file`` part of a form (the spec allows it). :class:`FilePart`
is fed the body as it arrives and returns the pieces of that part's content as they pass, keeping
at most one delimiter's worth of bytes back (a delimiter may straddle two pieces), so a form of
any size goes through with bounded memory. Other parts are skipped. Only stdlib is used.
"""

from __future__ import annotations

import email.message
import enum
from typing import Final

from operations import InvalidArgument

__all__ = ["MAX_PART_HEADERS", "FilePart", "boundary_of"]

MAX_PART_HEADERS: Final = 16 * 1024  # a part's header block, at most

OP: Final = "write_file"


def boundary_of(content_type: str) -> str | None:
    """The boundary of a ``multipart/form-data`` content type, ``None`` for any other type.

    Raises:
        InvalidArgument: a form without a usable boundary.
    """
    message = email.message.Message()
    message["content-type"] = content_type
    if message.get_content_type() != "multipart/form-data":
        return None
    boundary = message.get_param("boundary")
    if not isinstance(boundary, str) or not 0 < len(boundary) <= 70:
        raise InvalidArgument(OP, None, "multipart/form-data body without a valid boundary")
    return boundary


class _State(enum.Enum):
    PREAMBLE = "preamble"
    HEADERS = "headers"
    BODY = "body"
    DONE = "done"


def _form_name(block: bytes) -> str | None:
    message = email.message.Message()
    for line in block.decode("latin-1").split("\r\n"):
        name, sep, value = line.partition(":")
        if sep:
            message[name.strip()] = value.strip()
    found = message.get_param("name", header="content-disposition")
    return found if isinstance(found, str) else None


class FilePart:
    """Feed a form body in; get the ``file`` part's content out, piece by piece."""

    def __init__(self, boundary: str) -> None:
        self._delimiter = b"\r\n--" + boundary.encode("latin-1")
        self._buffer = bytearray(b"\r\n")  # the first delimiter has no CRLF before it
        self._state = _State.PREAMBLE
        self._in_file = False
        self._seen_file = False

    def feed(self, data: bytes) -> list[bytes]:
        """The content of the ``file`` part found in ``data`` (and what was held back).

        Raises:
            InvalidArgument: malformed framing or an oversized part header block.
        """
        self._buffer += data
        out: list[bytes] = []
        while True:
            if self._state is _State.DONE:
                self._buffer.clear()  # the epilogue is ignored
                return out
            if self._state is _State.PREAMBLE or self._state is _State.BODY:
                at = self._buffer.find(self._delimiter)
                if at < 0:
                    keep = len(self._delimiter) + 1
                    if self._in_file and len(self._buffer) > keep:
                        out.append(bytes(self._buffer[:-keep]))
                    if len(self._buffer) > keep:
                        del self._buffer[:-keep]
                    return out
                end = at + len(self._delimiter)
                if len(self._buffer) < end + 2:
                    return out  # need the two bytes after the delimiter
                if self._in_file and at:
                    out.append(bytes(self._buffer[:at]))
                after = bytes(self._buffer[end : end + 2])
                del self._buffer[: end + 2]
                if self._in_file:
                    self._in_file = False
                    self._seen_file = True
                if after == b"--":
                    self._state = _State.DONE
                elif after == b"\r\n":
                    self._state = _State.HEADERS
                else:
                    raise InvalidArgument(OP, None, "malformed multipart body (delimiter)")
                continue
            # HEADERS
            at = self._buffer.find(b"\r\n\r\n")
            if at < 0:
                if len(self._buffer) > MAX_PART_HEADERS:
                    raise InvalidArgument(
                        OP, None, f"multipart part headers exceed {MAX_PART_HEADERS} bytes"
                    )
                return out
            block = bytes(self._buffer[:at])
            del self._buffer[: at + 4]
            self._in_file = not self._seen_file and _form_name(block) == "file"
            self._state = _State.BODY

    def finish(self) -> None:
        """Check the body ended properly and held a ``file`` part.

        Raises:
            InvalidArgument: the body ended early, or had no ``file`` part.
        """
        if self._state is not _State.DONE:
            raise InvalidArgument(OP, None, "multipart body ended before its closing delimiter")
        if not self._seen_file:
            raise InvalidArgument(OP, None, 'multipart body has no "file" part')
