"""The Operations interfaces: what a tool may ask of the workspace it runs on.

Each protocol is the async, snake_case form of one reference interface. Paths are absolute, in the
backend's own namespace (``backend.root`` is the workspace root). Failures are always
:class:`~operations.OpsError` subclasses, the same type for the same situation on every backend.

One backend object implements all of them (:class:`Backend`); a tool only sees the part it needs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from ._abort import AbortSignal
from ._processes import ProcessOperations
from ._types import DirEntry, ExecResult, FileStat, OnData, SearchMatch

__all__ = [
    "Backend",
    "BashOperations",
    "EditOperations",
    "FileSystemOperations",
    "FindOperations",
    "GrepOperations",
    "LsOperations",
    "PowerShellOperations",
    "ReadOperations",
    "WriteOperations",
]


@runtime_checkable
class ReadOperations(Protocol):
    async def read_file(self, path: str) -> bytes:
        """Return the whole content of the regular file at ``path``.

        Raises:
            NotFound: nothing is there. IsADirectory: it is a directory.
            NotRegularFile: a FIFO, socket or device (never opened, so never blocks).
            TooLarge: the file is larger than the backend's read limit.
            EscapesRoot / PolicyDenied / PermissionDenied: as their names say.
        """
        ...

    async def access(self, path: str, *, writable: bool = False) -> None:
        """Return if ``path`` exists and is readable (and writable, if asked); raise otherwise."""
        ...

    async def detect_image_mime_type(self, path: str) -> str | None:
        """Sniff the first bytes of ``path``: ``"image/png"``, ``"image/jpeg"``, ``"image/gif"``,
        ``"image/webp"``, or ``None`` for anything else."""
        ...


@runtime_checkable
class WriteOperations(Protocol):
    async def write_file(self, path: str, content: bytes | str, *, mode: int | None = None) -> None:
        """Create or replace the file at ``path`` atomically (``str`` is encoded as UTF-8).

        The parent directory must exist. A final symlink is followed only if its target stays
        inside the root. The file gets the permission bits ``mode`` (``0`` to ``0o777``) when
        given; otherwise a replaced file keeps its mode and a new one gets the default.

        Raises:
            InvalidArgument: ``mode`` is out of range (:func:`~operations.check_mode`).
        """
        ...

    async def mkdir(self, path: str) -> None:
        """Create ``path`` and any missing parents; an existing directory is not an error."""
        ...


@runtime_checkable
class EditOperations(Protocol):
    async def read_file(self, path: str) -> bytes: ...

    async def write_file(self, path: str, content: bytes | str) -> None: ...

    async def access(self, path: str, *, writable: bool = False) -> None:
        """The edit tool calls this with ``writable=True``: readable *and* writable."""
        ...


@runtime_checkable
class LsOperations(Protocol):
    async def exists(self, path: str) -> bool:
        """``True`` if ``path`` resolves (following links) to something inside the root."""
        ...

    async def stat(self, path: str) -> FileStat:
        """Metadata of ``path``, following symlinks (inside the root only)."""
        ...

    async def readdir(self, path: str) -> list[str]:
        """The names in directory ``path``, without ``.`` and ``..``, in no promised order."""
        ...


@runtime_checkable
class FindOperations(Protocol):
    async def exists(self, path: str) -> bool: ...

    async def glob(
        self, pattern: str, cwd: str, *, ignore: Sequence[str] = (), limit: int = 1000
    ) -> list[str]:
        """Paths under ``cwd`` matching the glob ``pattern``, relative to ``cwd``, ``/``-separated,
        sorted; at most ``limit``. Runs where the files are. Rules: see ``operations._glob``.
        """
        ...


@runtime_checkable
class GrepOperations(Protocol):
    async def is_directory(self, path: str) -> bool:
        """Whether ``path`` is a directory. Raises NotFound if nothing is there."""
        ...

    async def read_file(self, path: str) -> bytes: ...

    def search(
        self,
        pattern: str,
        path: str,
        *,
        glob: str | None = None,
        ignore_case: bool = False,
        literal: bool = False,
        limit: int = 100,
    ) -> AsyncIterator[SearchMatch]:
        """Stream the lines matching ``pattern`` in the file or tree at ``path``, at most ``limit``.

        The search runs where the files are (on the broker, for a remote backend); matches arrive
        as they are found. Closing the iterator early stops the search. Rules (regex dialect,
        hidden files, ``.gitignore``, binary files, order): see ``operations._search``.

        Raises:
            NotFound: ``path`` does not exist. InvalidArgument: the pattern does not compile.
        """
        ...


@runtime_checkable
class BashOperations(Protocol):
    async def exec(
        self,
        command: str,
        cwd: str,
        *,
        on_data: OnData,
        signal: AbortSignal | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """Run ``command`` through the shell in ``cwd`` and stream its merged output to ``on_data``.

        ``env`` holds variables *added* to the environment the backend builds for commands
        (on a broker: a minimal ``PATH`` and ``LANG``, or what its policy allows); the caller's
        own environment is never sent, so an agent's secrets stay with the agent.

        ``timeout`` is in seconds and enforced where the command runs. When the command is killed
        (timeout, abort, output limit, shutdown) the whole process tree is gone before this
        returns, and the result has ``exit_code=None`` and the ``kill_reason``.

        **Cancellation:** cancelling the awaiting task kills the tree exactly as an abort does,
        then re-raises :class:`asyncio.CancelledError`.
        """
        ...


@runtime_checkable
class PowerShellOperations(Protocol):
    async def exec(
        self,
        command: str,
        cwd: str,
        *,
        on_data: OnData,
        signal: AbortSignal | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """As :meth:`BashOperations.exec`, through PowerShell."""
        ...


@runtime_checkable
class FileSystemOperations(Protocol):
    """The file operations beyond the tools' needs (SFTP, harnesses): lstat, remove, rename."""

    async def lstat(self, path: str) -> FileStat:
        """Metadata of ``path`` itself; a final symlink is not followed."""
        ...

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove a file, a symlink (not its target), or a directory (empty unless ``recursive``)."""
        ...

    async def rename(self, source: str, destination: str) -> None:
        """Rename inside the root; a final symlink at either end is moved or replaced, not followed."""
        ...

    async def list_dir(self, path: str) -> list[DirEntry]:
        """Like ``readdir``, with each entry's kind (links not followed)."""
        ...


class Backend(
    ReadOperations,
    WriteOperations,
    EditOperations,
    LsOperations,
    FindOperations,
    GrepOperations,
    BashOperations,
    FileSystemOperations,
    Protocol,
):
    """Everything a backend offers: every Operations interface, its root, and a way to close it.

    ``backend.powershell`` is the :class:`PowerShellOperations` of the same backend (``exec`` on
    the backend itself is bash).
    """

    @property
    def root(self) -> str:
        """The workspace root, absolute, in the backend's namespace."""
        ...

    @property
    def powershell(self) -> PowerShellOperations: ...

    @property
    def processes(self) -> ProcessOperations:
        """Processes that outlive a call (:class:`~operations.ProcessOperations`)."""
        ...

    async def aclose(self) -> None:
        """Release connections and stop running commands. Idempotent."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
