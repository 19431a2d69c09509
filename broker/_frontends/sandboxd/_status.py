"""The one mapping of :class:`~operations.OpsError` onto the sandboxd wire: a gRPC status for
ProcessService, an HTTP status and the spec's ``Error.code`` for the REST API.

The spec names the cases that matter to its clients: an unknown process is ``NOT_FOUND``, an
escape or a refusal is ``PERMISSION_DENIED`` / 403, resizing a process without a PTY is
``FAILED_PRECONDITION``, a non-empty directory removed without ``recursive`` is 409 ``CONFLICT``,
a missing file is 404.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import grpc

from operations import (
    Aborted,
    AlreadyExists,
    DirectoryNotEmpty,
    EscapesRoot,
    InvalidArgument,
    IsADirectory,
    NotADirectory,
    NotFound,
    NotRegularFile,
    OpsError,
    OutputLimit,
    PermissionDenied,
    PolicyDenied,
    Timeout,
    TooLarge,
    TooManyLinks,
    Unauthenticated,
    Unavailable,
)

__all__ = ["STATUS", "BodyTimeout", "Status", "public_message", "status_of"]


class BodyTimeout(Timeout):
    """A request body that stopped arriving: HTTP 408, and the connection is closed."""


@dataclass(frozen=True, slots=True)
class Status:
    """How one error type travels: gRPC code, HTTP status, the JSON body's ``code``."""

    grpc: grpc.StatusCode
    http: int
    code: str


_DENIED: Final = Status(grpc.StatusCode.PERMISSION_DENIED, 403, "PERMISSION_DENIED")
_PRECONDITION: Final = Status(grpc.StatusCode.FAILED_PRECONDITION, 400, "INVALID_ARGUMENT")

STATUS: Final[dict[type[OpsError], Status]] = {
    BodyTimeout: Status(grpc.StatusCode.DEADLINE_EXCEEDED, 408, "DEADLINE_EXCEEDED"),
    NotFound: Status(grpc.StatusCode.NOT_FOUND, 404, "NOT_FOUND"),
    IsADirectory: _PRECONDITION,
    NotADirectory: _PRECONDITION,
    AlreadyExists: Status(grpc.StatusCode.ALREADY_EXISTS, 409, "CONFLICT"),
    DirectoryNotEmpty: Status(grpc.StatusCode.FAILED_PRECONDITION, 409, "CONFLICT"),
    NotRegularFile: _PRECONDITION,
    TooManyLinks: _DENIED,
    PermissionDenied: _DENIED,
    PolicyDenied: _DENIED,
    EscapesRoot: _DENIED,
    TooLarge: Status(grpc.StatusCode.RESOURCE_EXHAUSTED, 413, "RESOURCE_EXHAUSTED"),
    Timeout: Status(grpc.StatusCode.DEADLINE_EXCEEDED, 504, "DEADLINE_EXCEEDED"),
    Aborted: Status(grpc.StatusCode.CANCELLED, 499, "CANCELLED"),
    OutputLimit: Status(grpc.StatusCode.RESOURCE_EXHAUSTED, 413, "RESOURCE_EXHAUSTED"),
    Unavailable: Status(grpc.StatusCode.UNAVAILABLE, 503, "UNAVAILABLE"),
    Unauthenticated: Status(grpc.StatusCode.UNAUTHENTICATED, 401, "UNAUTHENTICATED"),
    InvalidArgument: Status(grpc.StatusCode.INVALID_ARGUMENT, 400, "INVALID_ARGUMENT"),
}
"""Every error type's status; a subclass takes its nearest listed base."""

_INTERNAL: Final = Status(grpc.StatusCode.INTERNAL, 500, "INTERNAL")


def status_of(error: OpsError) -> Status:
    """The status ``error`` travels with (``INTERNAL`` / 500 for an unlisted type)."""
    for kind in type(error).__mro__:
        found = STATUS.get(kind)
        if found is not None:
            return found
    return _INTERNAL


def public_message(error: OpsError, root: str, sent: tuple[str, str] | None = None) -> str:
    """``str(error)`` as a sandboxd client reads it: paths are root-relative, never the broker's
    own workspace path.

    Args:
        error: what failed.
        root: the backend's root (its own namespace).
        sent: ``(workspace_path, as_sent)``: the request's path in the backend's namespace and
            as the client sent it; an error naming the first names the second.
    """
    base = root.rstrip("/")

    def shown(path: str) -> str:
        if sent is not None and path == sent[0]:
            return sent[1]
        if path in (base, root):
            return "/"
        if path.startswith(base + "/"):
            return path[len(base) + 1 :]
        return path

    reason = error.reason.replace(base + "/", "") if base else error.reason
    if error.path is None:
        return f"{error.op}: {reason}"
    return f"{error.op} {shown(error.path)!r}: {reason}"
