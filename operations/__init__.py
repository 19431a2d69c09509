"""The Operations contract: interfaces, value types, errors, cancellation, and the memory backend.

General layout: ``_protocols`` (the interfaces), ``_types`` (values that cross them), ``_errors``
(one hierarchy, stable codes), ``_abort`` (cancellation); the shared rules every backend follows
(``_glob``, ``_gitignore``, ``_walk``, ``_search``, ``_mime``); and the memory backend
(``_memory`` over ``_vfs`` and ``_runner``); cassettes (``_cassette`` the format,
``_recording`` the recorder around any backend, ``_replay`` the memory backend replaying one). Nothing here does network I/O, and
nothing here imports ``broker`` or ``agent_side``; both depend on this package.
"""

from ._abort import AbortController as AbortController
from ._abort import AbortSignal as AbortSignal
from ._abort import abort_scope as abort_scope
from ._cassette import CassetteError as CassetteError
from ._chunked import ChunkedFileOperations as ChunkedFileOperations
from ._chunked import read_chunks as read_chunks
from ._chunked import read_small as read_small
from ._chunked import read_small_streamed as read_small_streamed
from ._chunked import write_chunks as write_chunks
from ._errors import ERROR_TYPES as ERROR_TYPES
from ._errors import Aborted as Aborted
from ._errors import AlreadyExists as AlreadyExists
from ._errors import DirectoryNotEmpty as DirectoryNotEmpty
from ._errors import EscapesRoot as EscapesRoot
from ._errors import InvalidArgument as InvalidArgument
from ._errors import IsADirectory as IsADirectory
from ._errors import NotADirectory as NotADirectory
from ._errors import NotFound as NotFound
from ._errors import NotRegularFile as NotRegularFile
from ._errors import OpsError as OpsError
from ._errors import OutputLimit as OutputLimit
from ._errors import PermissionDenied as PermissionDenied
from ._errors import PolicyDenied as PolicyDenied
from ._errors import Timeout as Timeout
from ._errors import TooLarge as TooLarge
from ._errors import TooManyLinks as TooManyLinks
from ._errors import Unauthenticated as Unauthenticated
from ._errors import Unavailable as Unavailable
from ._errors import error_from_code as error_from_code
from ._gate import MAX_TREE_CHECK as MAX_TREE_CHECK
from ._gate import Gate as Gate
from ._gate import GatedBackend as GatedBackend
from ._gitignore import NO_RULES as NO_RULES
from ._gitignore import IgnoreRules as IgnoreRules
from ._gitignore import parent_ignore_rules as parent_ignore_rules
from ._glob import compile_glob as compile_glob
from ._guarded import AuditSink as AuditSink
from ._guarded import GuardedBackend as GuardedBackend
from ._memory import Dir as Dir
from ._memory import Fifo as Fifo
from ._memory import File as File
from ._memory import InMemoryOperations as InMemoryOperations
from ._memory import MemoryPowerShell as MemoryPowerShell
from ._memory import OpRecord as OpRecord
from ._memory import SeedValue as SeedValue
from ._memory import Symlink as Symlink
from ._memory_processes import MemoryProcesses as MemoryProcesses
from ._mime import IMAGE_SNIFF_BYTES as IMAGE_SNIFF_BYTES
from ._mime import sniff_image_mime_type as sniff_image_mime_type
from ._mode import check_mode as check_mode
from ._policy import DEFAULT_SANDBOX_READ as DEFAULT_SANDBOX_READ
from ._policy import AuditPolicy as AuditPolicy
from ._policy import CommandEnvCache as CommandEnvCache
from ._policy import EnvPolicy as EnvPolicy
from ._policy import ExecPolicy as ExecPolicy
from ._policy import Policy as Policy
from ._policy import PolicyEnforcer as PolicyEnforcer
from ._policy import PolicyError as PolicyError
from ._policy import ProcessPolicy as ProcessPolicy
from ._policy import SandboxPolicy as SandboxPolicy
from ._policy import build_command_env as build_command_env
from ._policy import glob_matches as glob_matches
from ._policy import load_policy as load_policy
from ._processes import GatedProcessOperations as GatedProcessOperations
from ._processes import ProcessInfo as ProcessInfo
from ._processes import ProcessOperations as ProcessOperations
from ._processes import ProcessOutput as ProcessOutput
from ._processes import ProcessState as ProcessState
from ._processes import PtySize as PtySize
from ._processes import RingReaders as RingReaders
from ._processes import Stream as Stream
from ._protocols import Backend as Backend
from ._protocols import BashOperations as BashOperations
from ._protocols import EditOperations as EditOperations
from ._protocols import FileSystemOperations as FileSystemOperations
from ._protocols import FindOperations as FindOperations
from ._protocols import GrepOperations as GrepOperations
from ._protocols import LsOperations as LsOperations
from ._protocols import PowerShellOperations as PowerShellOperations
from ._protocols import ReadOperations as ReadOperations
from ._protocols import WriteOperations as WriteOperations
from ._recording import RecordingBackend as RecordingBackend
from ._replay import CassetteMismatch as CassetteMismatch
from ._replay import ReplayOperations as ReplayOperations
from ._runner import CommandContext as CommandContext
from ._runner import CommandRunner as CommandRunner
from ._search import BINARY_SNIFF_BYTES as BINARY_SNIFF_BYTES
from ._search import FileFilter as FileFilter
from ._search import LineMatcher as LineMatcher
from ._search import is_binary as is_binary
from ._search import search_file as search_file
from ._search import search_tree as search_tree
from ._shell_exec import ShellExec as ShellExec
from ._timeout import MAX_TIMEOUT_S as MAX_TIMEOUT_S
from ._timeout import check_timeout as check_timeout
from ._types import DirEntry as DirEntry
from ._types import ExecResult as ExecResult
from ._types import FileKind as FileKind
from ._types import FileStat as FileStat
from ._types import KillReason as KillReason
from ._types import OnData as OnData
from ._types import SearchMatch as SearchMatch
from ._walk import WalkReach as WalkReach
from ._walk import glob_paths as glob_paths

__all__ = [
    "BINARY_SNIFF_BYTES",
    "DEFAULT_SANDBOX_READ",
    "ERROR_TYPES",
    "IMAGE_SNIFF_BYTES",
    "MAX_TIMEOUT_S",
    "MAX_TREE_CHECK",
    "NO_RULES",
    "AbortController",
    "AbortSignal",
    "Aborted",
    "AlreadyExists",
    "AuditPolicy",
    "AuditSink",
    "Backend",
    "BashOperations",
    "CassetteError",
    "CassetteMismatch",
    "ChunkedFileOperations",
    "CommandContext",
    "CommandEnvCache",
    "CommandRunner",
    "Dir",
    "DirEntry",
    "DirectoryNotEmpty",
    "EditOperations",
    "EnvPolicy",
    "EscapesRoot",
    "ExecPolicy",
    "ExecResult",
    "Fifo",
    "File",
    "FileFilter",
    "FileKind",
    "FileStat",
    "FileSystemOperations",
    "FindOperations",
    "Gate",
    "GatedBackend",
    "GatedProcessOperations",
    "GrepOperations",
    "GuardedBackend",
    "IgnoreRules",
    "InMemoryOperations",
    "InvalidArgument",
    "IsADirectory",
    "KillReason",
    "LineMatcher",
    "LsOperations",
    "MemoryPowerShell",
    "MemoryProcesses",
    "NotADirectory",
    "NotFound",
    "NotRegularFile",
    "OnData",
    "OpRecord",
    "OpsError",
    "OutputLimit",
    "PermissionDenied",
    "Policy",
    "PolicyDenied",
    "PolicyEnforcer",
    "PolicyError",
    "PowerShellOperations",
    "ProcessInfo",
    "ProcessOperations",
    "ProcessOutput",
    "ProcessPolicy",
    "ProcessState",
    "PtySize",
    "ReadOperations",
    "RecordingBackend",
    "ReplayOperations",
    "RingReaders",
    "SandboxPolicy",
    "SearchMatch",
    "SeedValue",
    "ShellExec",
    "Stream",
    "Symlink",
    "Timeout",
    "TooLarge",
    "TooManyLinks",
    "Unauthenticated",
    "Unavailable",
    "WalkReach",
    "WriteOperations",
    "abort_scope",
    "build_command_env",
    "check_mode",
    "check_timeout",
    "compile_glob",
    "error_from_code",
    "glob_matches",
    "glob_paths",
    "is_binary",
    "load_policy",
    "parent_ignore_rules",
    "read_chunks",
    "read_small",
    "read_small_streamed",
    "search_file",
    "search_tree",
    "sniff_image_mime_type",
    "write_chunks",
]
