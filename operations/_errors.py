"""The one error hierarchy every backend raises.

Every failure an Operations call can report is an :class:`OpsError`. Each subclass has a stable
``code`` (a short string that crosses the wire unchanged) and carries the operation and the path,
so front-ends map errors without parsing text and a tool prints the same message on every backend::

    OpsError
    ├── NotFound             no such file or directory
    ├── IsADirectory         a file was expected, a directory was found
    ├── NotADirectory        a directory was expected (also: a trailing slash after a file)
    ├── AlreadyExists        the target exists and the operation will not replace it
    ├── DirectoryNotEmpty    a directory to remove or replace still has entries
    ├── NotRegularFile       a FIFO, socket or device where a regular file was expected
    ├── TooManyLinks         a symlink loop, or more links than the resolver follows
    ├── PermissionDenied     the operating system refused (EACCES, EPERM, EROFS)
    ├── PolicyDenied         the broker's policy refused; ``rule`` names the rule
    ├── EscapesRoot          the path, a ``..`` or a symlink leads outside the workspace root
    ├── TooLarge             a size limit was exceeded
    ├── Timeout              the operation ran out of time
    ├── Aborted              the caller aborted (signal or task cancellation)
    ├── OutputLimit          a command produced more output than allowed
    ├── Unavailable          the backend cannot be reached, or has shut down
    ├── Unauthenticated      the backend refused the caller's credentials
    └── InvalidArgument      the request itself is malformed (NUL byte, empty path, bad pattern)
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "ERROR_TYPES",
    "Aborted",
    "AlreadyExists",
    "DirectoryNotEmpty",
    "EscapesRoot",
    "InvalidArgument",
    "IsADirectory",
    "NotADirectory",
    "NotFound",
    "NotRegularFile",
    "OpsError",
    "OutputLimit",
    "PermissionDenied",
    "PolicyDenied",
    "Timeout",
    "TooLarge",
    "TooManyLinks",
    "Unauthenticated",
    "Unavailable",
    "error_from_code",
]


class OpsError(Exception):
    """Base of every Operations failure.

    Args:
        op: the operation that failed, e.g. ``"read_file"``.
        path: the path as the caller gave it, or ``None`` when there is none.
        reason: a short human sentence; the default is the subclass's ``default_reason``.

    ``str(error)`` is ``"<op> '<path>': <reason>"`` (or ``"<op>: <reason>"`` without a path).
    """

    code: ClassVar[str] = "error"
    default_reason: ClassVar[str] = "operation failed"

    def __init__(self, op: str, path: str | None = None, reason: str | None = None) -> None:
        self.op = op
        self.path = path
        self.reason = reason if reason is not None else self.default_reason
        super().__init__(self._format())

    def _format(self) -> str:
        if self.path is None:
            return f"{self.op}: {self.reason}"
        return f"{self.op} {self.path!r}: {self.reason}"

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.op, self.path, self.reason))


class NotFound(OpsError):
    code = "not_found"
    default_reason = "no such file or directory"


class IsADirectory(OpsError):
    code = "is_a_directory"
    default_reason = "is a directory"


class NotADirectory(OpsError):
    code = "not_a_directory"
    default_reason = "not a directory"


class AlreadyExists(OpsError):
    code = "already_exists"
    default_reason = "already exists"


class DirectoryNotEmpty(OpsError):
    code = "directory_not_empty"
    default_reason = "directory not empty (pass recursive=True to remove it with its contents)"


class NotRegularFile(OpsError):
    code = "not_regular_file"
    default_reason = "not a regular file (FIFOs, sockets and devices are never opened)"


class TooManyLinks(OpsError):
    code = "too_many_links"
    default_reason = "too many levels of symbolic links"


class PermissionDenied(OpsError):
    code = "permission_denied"
    default_reason = "permission denied by the operating system"


class PolicyDenied(OpsError):
    """The broker's policy refused the operation.

    ``rule`` names the policy rule that matched (e.g. ``"deny_read: **/*.pem"``), so an auditor
    and a model both learn what to change.
    """

    code = "policy_denied"
    default_reason = "denied by policy"

    def __init__(
        self,
        op: str,
        path: str | None = None,
        reason: str | None = None,
        *,
        rule: str | None = None,
    ) -> None:
        self.rule = rule
        if reason is None and rule is not None:
            reason = f"denied by policy ({rule})"
        super().__init__(op, path, reason)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_policy_denied, (self.op, self.path, self.reason, self.rule))


def _rebuild_policy_denied(
    op: str, path: str | None, reason: str | None, rule: str | None
) -> PolicyDenied:
    return PolicyDenied(op, path, reason, rule=rule)


class EscapesRoot(OpsError):
    code = "escapes_root"
    default_reason = "path escapes the workspace root"


class TooLarge(OpsError):
    code = "too_large"
    default_reason = "exceeds the size limit"


class Timeout(OpsError):
    code = "timeout"
    default_reason = "timed out"


class Aborted(OpsError):
    code = "aborted"
    default_reason = "aborted by the caller"


class OutputLimit(OpsError):
    code = "output_limit"
    default_reason = "output exceeded the limit"


class Unavailable(OpsError):
    code = "unavailable"
    default_reason = "backend unavailable"


class Unauthenticated(OpsError):
    code = "unauthenticated"
    default_reason = "credentials refused"


class InvalidArgument(OpsError):
    code = "invalid_argument"
    default_reason = "invalid argument"


ERROR_TYPES: dict[str, type[OpsError]] = {
    cls.code: cls
    for cls in (
        NotFound,
        IsADirectory,
        NotADirectory,
        AlreadyExists,
        DirectoryNotEmpty,
        NotRegularFile,
        TooManyLinks,
        PermissionDenied,
        PolicyDenied,
        EscapesRoot,
        TooLarge,
        Timeout,
        Aborted,
        OutputLimit,
        Unavailable,
        Unauthenticated,
        InvalidArgument,
    )
}
"""Every error type by its stable ``code``; the wire carries the code, the client rebuilds the type."""


def error_from_code(
    code: str, op: str, path: str | None, reason: str | None, *, rule: str | None = None
) -> OpsError:
    """Rebuild an error that crossed the wire. An unknown code becomes a plain :class:`OpsError`."""
    cls = ERROR_TYPES.get(code)
    if cls is PolicyDenied:
        return PolicyDenied(op, path, reason, rule=rule)
    if cls is None:
        return OpsError(op, path, reason)
    return cls(op, path, reason)
