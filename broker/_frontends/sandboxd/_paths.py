"""Request paths and query values of the sandboxd REST API, parsed without I/O.

``/v1/files/{path}`` carries a sandbox-relative path whose separators a client may send as
``/`` or ``%2F`` (the SDK encodes every separator), so the path is taken from the *raw* request
target and percent-decoded once, here, strictly: a malformed escape, a NUL byte or bytes that are
not UTF-8 are refused as :class:`~operations.InvalidArgument` (400). Nothing is normalised: a
``..`` is handed to the backend, whose resolver refuses it when it climbs above the root (403),
so the decision is made on what is opened, never on a cleaned string.
"""

from __future__ import annotations

import re
from typing import Final

from operations import InvalidArgument

__all__ = [
    "FILES_PREFIX",
    "MAX_PATH_BYTES",
    "files_path",
    "parse_mode",
    "parse_recursive",
    "workspace_path",
]

FILES_PREFIX: Final = b"/v1/files/"

MAX_PATH_BYTES: Final = 4096  # PATH_MAX: a longer path cannot name anything

_HEX: Final = frozenset(b"0123456789abcdefABCDEF")
_MODE: Final = re.compile(r"0[0-7]{3}")
_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def _unquote(raw: bytes, op: str) -> bytes:
    """Percent-decode ``raw`` once, refusing a ``%`` not followed by two hex digits."""
    out = bytearray()
    i, n = 0, len(raw)
    while i < n:
        byte = raw[i]
        if byte != 0x25:  # '%'
            out.append(byte)
            i += 1
            continue
        pair = raw[i + 1 : i + 3]
        if len(pair) != 2 or pair[0] not in _HEX or pair[1] not in _HEX:
            raise InvalidArgument(op, None, f"bad percent-encoding at byte {i} of the request path")
        out.append(int(pair, 16))
        i += 3
    return bytes(out)


def files_path(raw_path: bytes, op: str) -> str:
    """The sandbox-relative path of a ``/v1/files/...`` request target (without its query).

    Returned as the client sent it, decoded (error messages name it so); ``""`` names the
    root. Leading separators mean nothing: the path is relative to the root whatever it starts
    with, as the spec says (:func:`workspace_path` drops them).

    Raises:
        InvalidArgument: not under ``/v1/files/``, a bad escape, a NUL, not UTF-8, or too long.
    """
    if not raw_path.startswith(FILES_PREFIX):
        raise InvalidArgument(op, None, "the request path must start with /v1/files/")
    decoded = _unquote(raw_path[len(FILES_PREFIX) :], op)
    if len(decoded) > MAX_PATH_BYTES:
        raise InvalidArgument(op, None, f"path is longer than {MAX_PATH_BYTES} bytes")
    if b"\0" in decoded:
        raise InvalidArgument(op, None, "path contains a NUL byte")
    try:
        text = decoded.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument(op, None, "path is not valid UTF-8") from None
    return text


def workspace_path(root: str, relative: str) -> str:
    """``relative`` (sandbox-relative, as the wire has it) in the backend's own namespace."""
    relative = relative.lstrip("/")
    if not relative:
        return root
    return root.rstrip("/") + "/" + relative


def parse_mode(value: str | None, op: str, path: str) -> int | None:
    """The ``mode`` query value (``^0[0-7]{3}$``) as permission bits, ``None`` when absent.

    Raises:
        InvalidArgument: any other form.
    """
    if value is None or value == "":
        return None
    if not _MODE.fullmatch(value):
        raise InvalidArgument(op, path, f"`mode` must match ^0[0-7]{{3}}$, got {value!r}")
    return int(value, 8)


def parse_recursive(value: str | None, op: str, path: str) -> bool:
    """The ``recursive`` query value: absent is ``False``; the spellings Go's ParseBool takes.

    Raises:
        InvalidArgument: anything else.
    """
    if value is None or value == "":
        return False
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise InvalidArgument(op, path, f"`recursive` must be true or false, got {value!r}")
