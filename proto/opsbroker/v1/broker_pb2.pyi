from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FileKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILE_KIND_UNSPECIFIED: _ClassVar[FileKind]
    FILE_KIND_FILE: _ClassVar[FileKind]
    FILE_KIND_DIRECTORY: _ClassVar[FileKind]
    FILE_KIND_SYMLINK: _ClassVar[FileKind]
    FILE_KIND_OTHER: _ClassVar[FileKind]

class Shell(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SHELL_UNSPECIFIED: _ClassVar[Shell]
    SHELL_BASH: _ClassVar[Shell]
    SHELL_POWERSHELL: _ClassVar[Shell]

class KillReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KILL_REASON_UNSPECIFIED: _ClassVar[KillReason]
    KILL_REASON_TIMEOUT: _ClassVar[KillReason]
    KILL_REASON_ABORTED: _ClassVar[KillReason]
    KILL_REASON_OUTPUT_LIMIT: _ClassVar[KillReason]
    KILL_REASON_SHUTDOWN: _ClassVar[KillReason]
    KILL_REASON_KILLED: _ClassVar[KillReason]
    KILL_REASON_IDLE_TIMEOUT: _ClassVar[KillReason]

class ProcessState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROCESS_STATE_UNSPECIFIED: _ClassVar[ProcessState]
    PROCESS_STATE_RUNNING: _ClassVar[ProcessState]
    PROCESS_STATE_EXITED: _ClassVar[ProcessState]
    PROCESS_STATE_KILLED: _ClassVar[ProcessState]

class OutputStream(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTPUT_STREAM_STDOUT: _ClassVar[OutputStream]
    OUTPUT_STREAM_STDERR: _ClassVar[OutputStream]
FILE_KIND_UNSPECIFIED: FileKind
FILE_KIND_FILE: FileKind
FILE_KIND_DIRECTORY: FileKind
FILE_KIND_SYMLINK: FileKind
FILE_KIND_OTHER: FileKind
SHELL_UNSPECIFIED: Shell
SHELL_BASH: Shell
SHELL_POWERSHELL: Shell
KILL_REASON_UNSPECIFIED: KillReason
KILL_REASON_TIMEOUT: KillReason
KILL_REASON_ABORTED: KillReason
KILL_REASON_OUTPUT_LIMIT: KillReason
KILL_REASON_SHUTDOWN: KillReason
KILL_REASON_KILLED: KillReason
KILL_REASON_IDLE_TIMEOUT: KillReason
PROCESS_STATE_UNSPECIFIED: ProcessState
PROCESS_STATE_RUNNING: ProcessState
PROCESS_STATE_EXITED: ProcessState
PROCESS_STATE_KILLED: ProcessState
OUTPUT_STREAM_STDOUT: OutputStream
OUTPUT_STREAM_STDERR: OutputStream

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class FrameBytes(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class PathRequest(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class AccessRequest(_message.Message):
    __slots__ = ("path", "writable")
    PATH_FIELD_NUMBER: _ClassVar[int]
    WRITABLE_FIELD_NUMBER: _ClassVar[int]
    path: str
    writable: bool
    def __init__(self, path: _Optional[str] = ..., writable: _Optional[bool] = ...) -> None: ...

class BoolReply(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: bool
    def __init__(self, value: _Optional[bool] = ...) -> None: ...

class MimeTypeReply(_message.Message):
    __slots__ = ("mime_type",)
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    mime_type: str
    def __init__(self, mime_type: _Optional[str] = ...) -> None: ...

class Chunk(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class SmallFile(_message.Message):
    __slots__ = ("data", "complete")
    DATA_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    complete: bool
    def __init__(self, data: _Optional[bytes] = ..., complete: _Optional[bool] = ...) -> None: ...

class WriteFileRequest(_message.Message):
    __slots__ = ("path", "data", "size", "mode")
    PATH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    path: str
    data: bytes
    size: int
    mode: int
    def __init__(self, path: _Optional[str] = ..., data: _Optional[bytes] = ..., size: _Optional[int] = ..., mode: _Optional[int] = ...) -> None: ...

class WriteSmallFileRequest(_message.Message):
    __slots__ = ("path", "data", "mode")
    PATH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    path: str
    data: bytes
    mode: int
    def __init__(self, path: _Optional[str] = ..., data: _Optional[bytes] = ..., mode: _Optional[int] = ...) -> None: ...

class FileStat(_message.Message):
    __slots__ = ("kind", "size", "mode", "mtime")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    MTIME_FIELD_NUMBER: _ClassVar[int]
    kind: FileKind
    size: int
    mode: int
    mtime: float
    def __init__(self, kind: _Optional[_Union[FileKind, str]] = ..., size: _Optional[int] = ..., mode: _Optional[int] = ..., mtime: _Optional[float] = ...) -> None: ...

class Names(_message.Message):
    __slots__ = ("names",)
    NAMES_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, names: _Optional[_Iterable[str]] = ...) -> None: ...

class DirEntry(_message.Message):
    __slots__ = ("name", "kind")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: FileKind
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[FileKind, str]] = ...) -> None: ...

class DirEntries(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[DirEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[DirEntry, _Mapping]]] = ...) -> None: ...

class RemoveRequest(_message.Message):
    __slots__ = ("path", "recursive")
    PATH_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    path: str
    recursive: bool
    def __init__(self, path: _Optional[str] = ..., recursive: _Optional[bool] = ...) -> None: ...

class RenameRequest(_message.Message):
    __slots__ = ("source", "destination")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    source: str
    destination: str
    def __init__(self, source: _Optional[str] = ..., destination: _Optional[str] = ...) -> None: ...

class GlobRequest(_message.Message):
    __slots__ = ("pattern", "cwd", "ignore", "limit")
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    IGNORE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    pattern: str
    cwd: str
    ignore: _containers.RepeatedScalarFieldContainer[str]
    limit: int
    def __init__(self, pattern: _Optional[str] = ..., cwd: _Optional[str] = ..., ignore: _Optional[_Iterable[str]] = ..., limit: _Optional[int] = ...) -> None: ...

class SearchRequest(_message.Message):
    __slots__ = ("pattern", "path", "glob", "ignore_case", "literal", "limit")
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    GLOB_FIELD_NUMBER: _ClassVar[int]
    IGNORE_CASE_FIELD_NUMBER: _ClassVar[int]
    LITERAL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    pattern: str
    path: str
    glob: str
    ignore_case: bool
    literal: bool
    limit: int
    def __init__(self, pattern: _Optional[str] = ..., path: _Optional[str] = ..., glob: _Optional[str] = ..., ignore_case: _Optional[bool] = ..., literal: _Optional[bool] = ..., limit: _Optional[int] = ...) -> None: ...

class SearchMatch(_message.Message):
    __slots__ = ("path", "line_number", "line_text")
    PATH_FIELD_NUMBER: _ClassVar[int]
    LINE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    LINE_TEXT_FIELD_NUMBER: _ClassVar[int]
    path: str
    line_number: int
    line_text: str
    def __init__(self, path: _Optional[str] = ..., line_number: _Optional[int] = ..., line_text: _Optional[str] = ...) -> None: ...

class ExecRequest(_message.Message):
    __slots__ = ("command", "cwd", "shell", "timeout", "env", "abort_id")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    SHELL_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    ABORT_ID_FIELD_NUMBER: _ClassVar[int]
    command: str
    cwd: str
    shell: Shell
    timeout: float
    env: _containers.ScalarMap[str, str]
    abort_id: str
    def __init__(self, command: _Optional[str] = ..., cwd: _Optional[str] = ..., shell: _Optional[_Union[Shell, str]] = ..., timeout: _Optional[float] = ..., env: _Optional[_Mapping[str, str]] = ..., abort_id: _Optional[str] = ...) -> None: ...

class AbortRunRequest(_message.Message):
    __slots__ = ("abort_id",)
    ABORT_ID_FIELD_NUMBER: _ClassVar[int]
    abort_id: str
    def __init__(self, abort_id: _Optional[str] = ...) -> None: ...

class ExecExit(_message.Message):
    __slots__ = ("exit_code", "kill_reason", "signal")
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    KILL_REASON_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    kill_reason: KillReason
    signal: int
    def __init__(self, exit_code: _Optional[int] = ..., kill_reason: _Optional[_Union[KillReason, str]] = ..., signal: _Optional[int] = ...) -> None: ...

class ExecEvent(_message.Message):
    __slots__ = ("output", "exit")
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    output: bytes
    exit: ExecExit
    def __init__(self, output: _Optional[bytes] = ..., exit: _Optional[_Union[ExecExit, _Mapping]] = ...) -> None: ...

class PtySize(_message.Message):
    __slots__ = ("cols", "rows")
    COLS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    cols: int
    rows: int
    def __init__(self, cols: _Optional[int] = ..., rows: _Optional[int] = ...) -> None: ...

class StartProcessRequest(_message.Message):
    __slots__ = ("command", "cwd", "env", "pty", "timeout", "idle_timeout", "backpressure")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    BACKPRESSURE_FIELD_NUMBER: _ClassVar[int]
    command: str
    cwd: str
    env: _containers.ScalarMap[str, str]
    pty: PtySize
    timeout: float
    idle_timeout: float
    backpressure: bool
    def __init__(self, command: _Optional[str] = ..., cwd: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., pty: _Optional[_Union[PtySize, _Mapping]] = ..., timeout: _Optional[float] = ..., idle_timeout: _Optional[float] = ..., backpressure: _Optional[bool] = ...) -> None: ...

class ProcessRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class AttachProcessRequest(_message.Message):
    __slots__ = ("id", "from_offset")
    ID_FIELD_NUMBER: _ClassVar[int]
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    id: str
    from_offset: int
    def __init__(self, id: _Optional[str] = ..., from_offset: _Optional[int] = ...) -> None: ...

class WriteStdinRequest(_message.Message):
    __slots__ = ("id", "data")
    ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    data: bytes
    def __init__(self, id: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class SignalProcessRequest(_message.Message):
    __slots__ = ("id", "signal")
    ID_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    id: str
    signal: int
    def __init__(self, id: _Optional[str] = ..., signal: _Optional[int] = ...) -> None: ...

class ResizeProcessRequest(_message.Message):
    __slots__ = ("id", "cols", "rows")
    ID_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    id: str
    cols: int
    rows: int
    def __init__(self, id: _Optional[str] = ..., cols: _Optional[int] = ..., rows: _Optional[int] = ...) -> None: ...

class ProcessInfo(_message.Message):
    __slots__ = ("id", "command", "cwd", "state", "started_at", "pty", "exit_code", "kill_reason", "bytes_out", "signal")
    ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    KILL_REASON_FIELD_NUMBER: _ClassVar[int]
    BYTES_OUT_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    id: str
    command: str
    cwd: str
    state: ProcessState
    started_at: float
    pty: PtySize
    exit_code: int
    kill_reason: KillReason
    bytes_out: int
    signal: int
    def __init__(self, id: _Optional[str] = ..., command: _Optional[str] = ..., cwd: _Optional[str] = ..., state: _Optional[_Union[ProcessState, str]] = ..., started_at: _Optional[float] = ..., pty: _Optional[_Union[PtySize, _Mapping]] = ..., exit_code: _Optional[int] = ..., kill_reason: _Optional[_Union[KillReason, str]] = ..., bytes_out: _Optional[int] = ..., signal: _Optional[int] = ...) -> None: ...

class ProcessList(_message.Message):
    __slots__ = ("processes",)
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    processes: _containers.RepeatedCompositeFieldContainer[ProcessInfo]
    def __init__(self, processes: _Optional[_Iterable[_Union[ProcessInfo, _Mapping]]] = ...) -> None: ...

class ProcessOutput(_message.Message):
    __slots__ = ("offset", "data", "stream", "dropped")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    stream: OutputStream
    dropped: int
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ..., stream: _Optional[_Union[OutputStream, str]] = ..., dropped: _Optional[int] = ...) -> None: ...

class CapabilitiesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Limits(_message.Message):
    __slots__ = ("max_read_bytes", "max_write_bytes", "max_output_bytes", "default_timeout", "max_timeout", "chunk_bytes", "pids_max", "memory_max", "max_processes_per_principal", "max_processes", "ring_bytes", "max_process_lifetime")
    MAX_READ_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_WRITE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    MAX_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_BYTES_FIELD_NUMBER: _ClassVar[int]
    PIDS_MAX_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MAX_FIELD_NUMBER: _ClassVar[int]
    MAX_PROCESSES_PER_PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    MAX_PROCESSES_FIELD_NUMBER: _ClassVar[int]
    RING_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_PROCESS_LIFETIME_FIELD_NUMBER: _ClassVar[int]
    max_read_bytes: int
    max_write_bytes: int
    max_output_bytes: int
    default_timeout: float
    max_timeout: float
    chunk_bytes: int
    pids_max: int
    memory_max: int
    max_processes_per_principal: int
    max_processes: int
    ring_bytes: int
    max_process_lifetime: float
    def __init__(self, max_read_bytes: _Optional[int] = ..., max_write_bytes: _Optional[int] = ..., max_output_bytes: _Optional[int] = ..., default_timeout: _Optional[float] = ..., max_timeout: _Optional[float] = ..., chunk_bytes: _Optional[int] = ..., pids_max: _Optional[int] = ..., memory_max: _Optional[int] = ..., max_processes_per_principal: _Optional[int] = ..., max_processes: _Optional[int] = ..., ring_bytes: _Optional[int] = ..., max_process_lifetime: _Optional[float] = ...) -> None: ...

class CapabilitiesReply(_message.Message):
    __slots__ = ("version", "root", "resolver", "cgroup_kill", "sandbox", "limits", "powershell", "search", "tracking", "openat2_available", "landlock_abi")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ROOT_FIELD_NUMBER: _ClassVar[int]
    RESOLVER_FIELD_NUMBER: _ClassVar[int]
    CGROUP_KILL_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    POWERSHELL_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    TRACKING_FIELD_NUMBER: _ClassVar[int]
    OPENAT2_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    LANDLOCK_ABI_FIELD_NUMBER: _ClassVar[int]
    version: str
    root: str
    resolver: str
    cgroup_kill: bool
    sandbox: bool
    limits: Limits
    powershell: bool
    search: str
    tracking: str
    openat2_available: bool
    landlock_abi: int
    def __init__(self, version: _Optional[str] = ..., root: _Optional[str] = ..., resolver: _Optional[str] = ..., cgroup_kill: _Optional[bool] = ..., sandbox: _Optional[bool] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., powershell: _Optional[bool] = ..., search: _Optional[str] = ..., tracking: _Optional[str] = ..., openat2_available: _Optional[bool] = ..., landlock_abi: _Optional[int] = ...) -> None: ...

class ErrorDetail(_message.Message):
    __slots__ = ("code", "op", "path", "reason", "rule")
    CODE_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    code: str
    op: str
    path: str
    reason: str
    rule: str
    def __init__(self, code: _Optional[str] = ..., op: _Optional[str] = ..., path: _Optional[str] = ..., reason: _Optional[str] = ..., rule: _Optional[str] = ...) -> None: ...
