"""What a tool's failure says to the model, the same on every backend.

A tool fails by raising; the loop shows ``str(error)`` to the model. Backend errors
(:class:`~operations.OpsError`) are rendered the way Node renders the matching system error, so a
model sees the reference's texts (``ENOENT: no such file or directory, access '/w/a.txt'``).
Errors Node has no code for (policy, confinement, limits) keep the same shape with the stable
error code and its fixed description (``ESCAPES_ROOT: path escapes the workspace root, open
'...'``); a backend's own wording is not shown, since it differs between backends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from operations import Aborted, AbortSignal, OpsError, PolicyDenied, abort_scope

__all__ = [
    "OPERATION_ABORTED",
    "ToolError",
    "abortable",
    "check_aborted",
    "describe_error",
    "describe_reason",
    "errno_name",
]

OPERATION_ABORTED = "Operation aborted"

_ERRNO: dict[str, tuple[str, str]] = {
    "not_found": ("ENOENT", "no such file or directory"),
    "is_a_directory": ("EISDIR", "illegal operation on a directory"),
    "not_a_directory": ("ENOTDIR", "not a directory"),
    "already_exists": ("EEXIST", "file already exists"),
    "permission_denied": ("EACCES", "permission denied"),
    "too_many_links": ("ELOOP", "too many symbolic links encountered"),
}


class ToolError(Exception):
    """A failure whose message is exactly what the model should read."""


def errno_name(error: OpsError) -> str | None:
    """The POSIX error name for ``error`` (``ENOENT``...), or ``None`` when there is none."""
    entry = _ERRNO.get(error.code)
    return entry[0] if entry else None


def describe_error(error: BaseException, syscall: str, path: str | None) -> str:
    """``<CODE>: <description>, <syscall> '<path>'`` for an Operations error; ``str`` otherwise.

    ``path=None`` leaves the path out, as Node does for errors of a read on an open file.
    """
    if not isinstance(error, OpsError):
        return str(error)
    where = syscall if path is None else f"{syscall} '{path}'"
    entry = _ERRNO.get(error.code)
    if entry is not None:
        return f"{entry[0]}: {entry[1]}, {where}"
    return f"{error.code.upper()}: {describe_reason(error)}, {where}"


def describe_reason(error: OpsError) -> str:
    """The error's fixed description, so every backend says the same; a policy denial keeps
    its reason, which names the rule to change."""
    if isinstance(error, PolicyDenied):
        return error.reason
    return type(error).default_reason


def check_aborted(signal: AbortSignal | None) -> None:
    """Raise ``Operation aborted`` if ``signal`` has fired (checked between awaits)."""
    if signal is not None and signal.aborted:
        raise ToolError(OPERATION_ABORTED)


@asynccontextmanager
async def abortable(signal: AbortSignal | None) -> AsyncIterator[None]:
    """Run a block that an abort interrupts at once with ``Operation aborted``.

    Used by the tools that only read (read, ls, find, grep): whatever they were awaiting is
    abandoned. ``write`` and ``edit`` instead check between awaits, so a write in flight settles.
    """
    check_aborted(signal)
    try:
        async with abort_scope(signal, "tool"):
            yield
    except Aborted:
        raise ToolError(OPERATION_ABORTED) from None
