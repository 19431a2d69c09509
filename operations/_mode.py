"""The one rule for the permission bits a write may give a file, and its one message.

``write_file(..., mode=...)`` and ``write_chunks(..., mode=...)`` take the permission bits of
the file they create or replace: an ``int`` from ``0`` to ``0o777`` (no setuid, setgid or sticky
bit: a workspace file never needs one). ``None`` means the default: a new file gets what
``open(2)`` gives it under the umask, a replaced file keeps its own mode.
"""

from __future__ import annotations

from typing import Final

from ._errors import InvalidArgument

__all__ = ["MAX_FILE_MODE", "check_mode"]

MAX_FILE_MODE: Final = 0o777


def check_mode(mode: int | None, op: str, path: str | None) -> int | None:
    """Return ``mode`` if it is valid permission bits for a written file, or ``None``.

    Raises:
        InvalidArgument: ``mode`` is not an ``int`` from ``0`` to ``0o777``.
    """
    if mode is None:
        return None
    if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= MAX_FILE_MODE:
        raise InvalidArgument(
            op, path, f"`mode` must be permission bits from 0o000 to 0o777, got {mode!r}"
        )
    return mode
