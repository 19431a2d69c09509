"""Policy: what a principal may touch, as data, so every backend applies the same rules.

A :class:`Policy` is one pydantic model, loaded from TOML with :func:`load_policy`. It is pure data
with no I/O beyond reading its own file, so the memory backend (a CI harness) and the broker (a
real workspace) refuse exactly the same requests with the same :class:`~operations.PolicyDenied`.

:class:`PolicyEnforcer` answers the questions a front-end asks before it calls a backend
("may ``op`` read this root-relative path?"), each raising ``PolicyDenied`` whose ``rule`` names
the rule that matched, e.g. ``"deny_read: **/*.pem"``, so an auditor and a model both learn what
to change.

Path globs (``deny_read``, ``deny_write``) use the one glob dialect of the product
(``operations._glob``: ``*``, ``?``, ``[abc]``, ``{a,b}``, ``**``; a pattern without ``/``
matches a name at any depth, one with ``/`` the whole path from the root), matched against the
``/``-separated path relative to the workspace root. A path is covered when the glob matches it
*or one of its parent directories*, so ``secrets`` covers ``secrets/a/b``.

**Deny lists:** ``deny_read`` and ``deny_write`` given in a policy *extend* the built-in globs
(secrets, files that run code later); ``replace_default_deny_read`` / ``..._write`` replace them.

**Timeouts:** a command with no timeout gets ``exec.default_timeout`` (an unset one follows a
lower ``exec.max_timeout`` down); one that asks for more than
``exec.max_timeout`` is *refused* (``PolicyDenied``, rule ``exec.max_timeout``), never silently
shortened, so the caller learns the limit instead of seeing a surprising kill.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ._errors import InvalidArgument, PolicyDenied
from ._glob import GlobMatcher, compile_glob, translate_glob
from ._timeout import check_timeout

__all__ = [
    "AuditPolicy",
    "CommandEnvCache",
    "EnvPolicy",
    "ExecPolicy",
    "Policy",
    "PolicyEnforcer",
    "PolicyError",
    "SandboxPolicy",
    "build_command_env",
    "glob_matches",
    "load_policy",
]

MiB = 1024 * 1024

DEFAULT_DENY_READ = (
    "**/.env",
    "**/.env.*",
    "**/*.pem",
    "**/*.key",
    "**/id_rsa*",
    "**/id_ed25519*",
    "**/id_ecdsa*",
    "**/.ssh",
    "**/.netrc",
    "**/.git-credentials",
    "**/.aws/credentials",
)
"""Secrets a coding agent has no reason to read: dotenv files, private keys, credentials."""

DEFAULT_DENY_WRITE = (
    *DEFAULT_DENY_READ,
    "**/.git/hooks",
    "**/.git/config",
    "**/.gitmodules",
    "**/.bashrc",
    "**/.bash_profile",
    "**/.profile",
    "**/.zshrc",
    "**/.mcp.json",
    ".vscode",
    ".idea",
)
"""Files whose change runs code later, outside the agent's turn (git hooks, shell start-up files,
editor and tool settings), plus every secret: a principal may not plant a key either."""

DEFAULT_INHERIT_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "TZ",
    "USER",
    "LOGNAME",
)
"""Variables a shell needs to behave normally; nothing that usually holds a credential."""

DEFAULT_SANDBOX_READ = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/proc",
    "/sys/devices/system/cpu",
    "/nix/store",
)
"""System directories a sandboxed command may read and execute from (missing ones are skipped).
Not ``/dev``: only the harmless devices are opened to commands (see ``broker._landlock``), never
a disk."""


class PolicyError(ValueError):
    """A policy file is missing, not TOML, or has an invalid value.

    The message has one line per problem, each naming the key (dotted, e.g. ``exec.max_timeout``)
    and what is wrong with it.
    """


def _check_globs(value: list[str]) -> list[str]:
    for pattern in value:
        if not pattern or pattern.startswith("/") or "\x00" in pattern:
            raise ValueError(
                f"{pattern!r} is not a root-relative glob (use e.g. '**/*.pem' or 'secrets')"
            )
        try:
            _matcher(pattern)
        except InvalidArgument as exc:
            raise ValueError(exc.reason) from None
    return value


def _check_absolute(value: list[str]) -> list[str]:
    for path in value:
        if not path.startswith("/"):
            raise ValueError(f"{path!r} must be an absolute path")
    return value


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ExecPolicy(_Section):
    """Shell commands: whether they run at all, through which shells, for how long, how loud, and
    within which process and memory limits (the process manager's, built from this table)."""

    enabled: bool = Field(default=True, description="Run shell commands at all.")
    shells: list[Literal["bash", "powershell"]] = Field(
        default=["bash"], description="Shells a command may run through."
    )
    default_timeout: Annotated[float, Field(gt=0)] = Field(
        default=120.0, description="Seconds a command may run when the caller gives no timeout."
    )
    max_timeout: Annotated[float, Field(gt=0)] = Field(
        default=600.0,
        description="Largest timeout a caller may ask for, in seconds; a larger one is refused.",
    )
    max_output_bytes: Annotated[int, Field(gt=0)] = Field(
        default=16 * MiB,
        description="Output bytes after which the command's process tree is killed (output_limit).",
    )
    background_ttl: Annotated[float, Field(gt=0)] = Field(
        default=3600.0,
        description="Seconds a detached background process may live before it is killed.",
    )
    pids_max: Annotated[int, Field(gt=0)] = Field(
        default=4096,
        description=(
            "Processes and threads a command's tree may hold at once (its cgroup's pids.max): "
            "bounds a fork bomb, leaves room for parallel builds. Needs writable cgroups."
        ),
    )
    memory_max: Annotated[int, Field(gt=0)] | None = Field(
        default=None,
        description=(
            "Bytes of memory a command's tree may use before the kernel kills it (its cgroup's "
            "memory limit); none by default, as a build's peak is too varied to guess. Needs "
            "writable cgroups."
        ),
    )
    kill_grace: Annotated[float, Field(ge=0, le=60)] = Field(
        default=1.0,
        description=(
            "Seconds between SIGTERM and SIGKILL when a command's tree is killed: time for a "
            "tool to clean up, short enough for the call to return promptly."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _default_follows_max(cls, data: Any) -> Any:
        """An unset ``default_timeout`` follows a ``max_timeout`` set below it down, so setting
        only ``max_timeout = 60`` is a valid policy; a default set above the maximum is not."""
        if isinstance(data, Mapping) and "default_timeout" not in data:
            maximum = data.get("max_timeout")
            default = cls.model_fields["default_timeout"].default
            if isinstance(maximum, int | float) and 0 < maximum < default:
                return {**data, "default_timeout": maximum}
        return data

    @model_validator(mode="after")
    def _default_within_max(self) -> ExecPolicy:
        if self.default_timeout > self.max_timeout:
            raise ValueError(
                f"default_timeout ({self.default_timeout:g} s) is above "
                f"max_timeout ({self.max_timeout:g} s); lower it or raise max_timeout"
            )
        return self


class EnvPolicy(_Section):
    """The environment a command starts with: nothing of the broker's own leaks unless listed."""

    inherit: list[str] = Field(
        default=list(DEFAULT_INHERIT_ENV),
        description="Names (or fnmatch patterns such as `LC_*`) copied from the broker's environment.",
    )
    set: dict[str, str] = Field(
        default={}, description="Fixed values, applied after `inherit` (they win)."
    )

    @field_validator("inherit")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not name or "=" in name or "\x00" in name:
                raise ValueError(f"{name!r} is not a variable name")
        return value

    @field_validator("set")
    @classmethod
    def _values(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not name or "=" in name or "\x00" in name or "\x00" in text:
                raise ValueError(f"{name!r} is not a valid variable assignment")
        return value


class SandboxPolicy(_Section):
    """The kernel sandbox around commands (Linux Landlock)."""

    mode: Literal["none", "auto", "landlock"] = Field(
        default="none",
        description=(
            "`none`: commands run unconfined by the kernel. `auto`: use Landlock when the kernel "
            "has it (capabilities say whether it is active). `landlock`: required; the broker "
            "refuses to start on a kernel without it."
        ),
    )
    read: list[str] = Field(
        default=list(DEFAULT_SANDBOX_READ),
        description="Absolute directories a sandboxed command may read and execute from.",
    )
    write: list[str] = Field(
        default=[],
        description=(
            "Extra absolute directories a sandboxed command may write "
            "(the root and a private temp dir always are)."
        ),
    )

    _absolute_read = field_validator("read")(_check_absolute)
    _absolute_write = field_validator("write")(_check_absolute)


class ProcessPolicy(_Section):
    """Processes that outlive a call (``ProcessOperations``): how many, how long, how much of their
    output is kept, and how long a finished one's record stays."""

    max_per_principal: Annotated[int, Field(gt=0)] = Field(
        default=16, description="Running processes one principal may have at once."
    )
    max_total: Annotated[int, Field(gt=0)] = Field(
        default=64, description="Running processes the whole broker may have at once."
    )
    ring_bytes: Annotated[int, Field(gt=0)] = Field(
        default=1 * MiB,
        description="Output kept per process for replay; an attach from further back is told "
        "how many bytes were dropped.",
    )
    max_lifetime: Annotated[float, Field(gt=0)] = Field(
        default=86400.0,
        description="Seconds a process may live (a caller may ask for less, not more).",
    )
    idle_timeout: Annotated[float, Field(gt=0)] | None = Field(
        default=None,
        description="Seconds a process may go without output before it is killed "
        "(idle_timeout); none by default (a server may be quiet). A caller may ask for less.",
    )
    retention: Annotated[float, Field(ge=0)] = Field(
        default=3600.0,
        description="Seconds a finished process's record and output stay for wait and attach.",
    )


class AuditPolicy(_Section):
    """The audit trail."""

    fail_closed: bool = Field(
        default=True, description="Refuse operations while the audit log cannot be written."
    )
    fsync: bool = Field(
        default=False, description="fsync after every line (durable across power loss; slower)."
    )
    log_commands: bool = Field(
        default=True,
        description="Record command text; when false, only its SHA-256 (for commands that may "
        "carry secrets on their command line).",
    )
    rotate_bytes: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="Start a new file (chained to the last) past this size; 0 never rotates.",
    )


class Policy(_Section):
    """Everything a deployment decides about what a principal may do.

    The defaults are safe for a coding agent: reads and writes inside the root, except secrets
    (``deny_read``) and files that run code later (``deny_write``); commands with a bounded
    timeout and output, an environment reduced to an allowlist. The kernel sandbox is opt-in
    (``sandbox.mode``), since it needs Landlock; see ``docs/security-model.md``.
    """

    root: str | None = Field(
        default=None, description="Workspace root; the command line's `--root` wins over it."
    )
    read_only: bool = Field(
        default=False,
        description=(
            "Refuse every change: write, mkdir, remove, rename. Commands are bound too only "
            "with the kernel sandbox on (`sandbox.mode`: no write access under the root); "
            "without it a command can still write, and `serve` warns at start."
        ),
    )
    deny_read: list[str] = Field(
        default=list(DEFAULT_DENY_READ),
        description=(
            "Root-relative globs no file operation may read (content or search results). "
            "The globs given are added to the built-in secret globs (the default)."
        ),
    )
    replace_default_deny_read: bool = Field(
        default=False,
        description="Let `deny_read` replace the built-in secret globs instead of extending them.",
    )
    deny_write: list[str] = Field(
        default=list(DEFAULT_DENY_WRITE),
        description=(
            "Root-relative globs no file operation may create, change, remove or rename. "
            "The globs given are added to the built-in ones (the default)."
        ),
    )
    replace_default_deny_write: bool = Field(
        default=False,
        description="Let `deny_write` replace the built-in globs instead of extending them.",
    )
    max_read_bytes: Annotated[int, Field(gt=0)] = Field(
        default=64 * MiB, description="Largest file `read_file` returns."
    )
    max_write_bytes: Annotated[int, Field(gt=0)] = Field(
        default=64 * MiB, description="Largest content `write_file` accepts."
    )
    exec: ExecPolicy = Field(default_factory=ExecPolicy, description="Shell commands.")
    process: ProcessPolicy = Field(
        default_factory=ProcessPolicy, description="Processes that outlive a call."
    )
    env: EnvPolicy = Field(default_factory=EnvPolicy, description="Command environment.")
    sandbox: SandboxPolicy = Field(default_factory=SandboxPolicy, description="Kernel sandbox.")
    audit: AuditPolicy = Field(default_factory=AuditPolicy, description="Audit trail.")

    _globs_read = field_validator("deny_read")(_check_globs)
    _globs_write = field_validator("deny_write")(_check_globs)

    @model_validator(mode="before")
    @classmethod
    def _extend_defaults(cls, data: Any) -> Any:
        """A ``deny_*`` list given is added to the built-in globs unless its
        ``replace_default_deny_*`` key says otherwise: a policy naming one more secret must
        not make ``.env`` readable."""
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        for key, defaults in (("deny_read", DEFAULT_DENY_READ), ("deny_write", DEFAULT_DENY_WRITE)):
            given = data.get(key)
            if isinstance(given, list) and data.get(f"replace_default_{key}") is not True:
                data[key] = [*defaults, *(g for g in given if g not in defaults)]
        return data

    @classmethod
    def from_mapping(cls, data: Mapping[str, object], *, source: str = "") -> Policy:
        """Validate ``data`` (a parsed TOML document).

        Raises:
            PolicyError: when a key is unknown or a value is invalid; one line per problem.
        """
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise PolicyError(_describe(exc, source)) from None


def _describe(exc: ValidationError, source: str) -> str:
    lines = [f"invalid policy {source}:" if source else "invalid policy:"]
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) or "(top level)"
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown key (check the spelling; see docs/policy-reference.md)"
        lines.append(f"  {key}: {message}")
    return "\n".join(lines)


def load_policy(path: str | Path | None) -> Policy:
    """Read a policy from a TOML file; ``None`` gives the default policy.

    Raises:
        PolicyError: the file cannot be read, is not TOML, or has invalid keys or values.
    """
    if path is None:
        return Policy()
    try:
        with open(path, "rb") as file:
            data = tomllib.load(file)
    except OSError as exc:
        raise PolicyError(f"cannot read policy file {str(path)!r}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"policy file {str(path)!r} is not valid TOML: {exc}") from None
    return Policy.from_mapping(data, source=f"file {str(path)!r}")


# -- globs ------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def _matcher(pattern: str) -> GlobMatcher:
    return compile_glob(pattern, op="policy")


def glob_matches(pattern: str, path: str) -> bool:
    """Whether the root-relative ``path`` or one of its parent directories matches ``pattern``
    (in the shared glob dialect of ``operations._glob``)."""
    matcher = _matcher(pattern)
    parts = path.split("/")
    return any(matcher.match("/".join(parts[:end])) for end in range(len(parts), 0, -1))


class _DenyList:
    """The globs of one ``deny_*`` key, compiled into two regexes (names at any depth; paths
    from the root) that find in one pass whether a path or a parent of it is covered. Only on a
    hit are the globs tried one by one, to name the rule."""

    def __init__(self, name: str, patterns: Sequence[str]) -> None:
        self.name = name
        self.patterns = list(patterns)
        names = [translate_glob(p, op="policy") for p in patterns if "/" not in p]
        paths = [translate_glob(p.lstrip("/") or "**", op="policy") for p in patterns if "/" in p]
        self._names = (
            re.compile(rf"(?:^|(?<=/))(?:{'|'.join(names)})(?=/|\Z)", re.DOTALL) if names else None
        )
        self._paths = re.compile(rf"(?:{'|'.join(paths)})(?=/|\Z)", re.DOTALL) if paths else None

    def match(self, path: str) -> str | None:
        """``"<key>: <glob>"`` for the first glob covering ``path``, or ``None``."""
        path = "" if path == "." else path
        if not path:
            return None
        hit = (self._names is not None and self._names.search(path) is not None) or (
            self._paths is not None and self._paths.match(path) is not None
        )
        if not hit:
            return None
        for pattern in self.patterns:
            if glob_matches(pattern, path):
                return f"{self.name}: {pattern}"
        return None


# -- enforcement ------------------------------------------------------------------------------


class PolicyEnforcer:
    """Answers "may this happen?" for one :class:`Policy`; every ``check_*`` raises on "no".

    Paths are relative to the workspace root, ``/``-separated, already normalised (no ``.``,
    ``..`` or empty segments); ``""`` or ``"."`` is the root itself.
    """

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._deny_read = _DenyList("deny_read", policy.deny_read)
        self._deny_write = _DenyList("deny_write", policy.deny_write)

    def check_read(self, op: str, path: str, *, shown: str | None = None) -> None:
        """Raise ``PolicyDenied`` (rule ``deny_read: <glob>``) if ``path`` may not be read.

        ``shown`` is the path as the caller wrote it, for the error (default: ``path``).
        """
        rule = self._deny_read.match(path)
        if rule is not None:
            raise PolicyDenied(op, path if shown is None else shown, rule=rule)

    def check_write(self, op: str, path: str, *, shown: str | None = None) -> None:
        """Raise ``PolicyDenied`` (rule ``read_only`` or ``deny_write: <glob>``) if ``path`` may
        not be created, changed, removed or renamed."""
        shown = path if shown is None else shown
        if self.policy.read_only:
            raise PolicyDenied(op, shown, rule="read_only")
        rule = self._deny_write.match(path)
        if rule is not None:
            raise PolicyDenied(op, shown, rule=rule)

    def read_denied(self, path: str) -> bool:
        """Whether ``check_read`` would refuse ``path`` (for filtering search results)."""
        return self._deny_read.match(path) is not None

    def check_exec(
        self, op: str, cwd: str, shell: str, timeout: float | None, *, shown: str | None = None
    ) -> float:
        """Check a command request and return the timeout to enforce, in seconds.

        Raises:
            InvalidArgument: the timeout is not a valid timeout (:func:`~operations.check_timeout`:
                zero, negative, not finite).
            PolicyDenied: ``exec.enabled`` is false, ``shell`` is not in ``exec.shells``, the
                timeout is above ``exec.max_timeout``. (Whether ``cwd`` may be read is decided by
                the backend on the directory it opens, through a ``Gate``.)
        """
        spec = self.policy.exec
        cwd = cwd if shown is None else shown
        if not spec.enabled:
            raise PolicyDenied(op, cwd, rule="exec.enabled: false")
        if shell not in spec.shells:
            raise PolicyDenied(op, cwd, rule=f"exec.shells: {shell} not in {list(spec.shells)}")
        timeout = check_timeout(timeout, op, cwd)
        if timeout is None:
            timeout = spec.default_timeout
        elif timeout > spec.max_timeout:
            raise PolicyDenied(
                op,
                cwd,
                f"timeout {timeout:g} s is above the policy maximum (exec.max_timeout: "
                f"{spec.max_timeout:g}); ask for at most {spec.max_timeout:g} s",
                rule=f"exec.max_timeout: {spec.max_timeout:g}",
            )
        return timeout


def build_command_env(
    policy: Policy,
    parent: Mapping[str, str],
    overrides: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The complete environment for a command: allowlisted names from ``parent`` (the broker's
    own environment), then ``env.set``, then the caller's ``overrides``.

    Nothing else of ``parent`` reaches the command, so a token in the broker's environment stays
    there. The result is the whole environment, not a delta to merge.
    """
    patterns = policy.env.inherit
    env = {
        name: value
        for name, value in parent.items()
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)
    }
    env.update(policy.env.set)
    if overrides:
        env.update(overrides)
    return env


class CommandEnvCache:
    """:func:`build_command_env` for one policy, without matching every name of the parent
    environment against every ``env.inherit`` glob on each command.

    The inherited part (allowlisted names plus ``env.set``) is kept while the parent environment
    and the policy stay the same; a change to either (``os.environ`` mutated at run time, say) is
    seen by one dict comparison per call, so the result is always what ``build_command_env``
    would return.

    Args:
        parent: the environment names are copied from; ``None`` for this process's, read at
            each call.
    """

    __slots__ = ("_base", "_parent", "_policy", "_seen")

    def __init__(self, parent: Mapping[str, str] | None = None) -> None:
        self._parent = parent
        self._policy: Policy | None = None
        self._seen: Mapping[Any, Any] | None = None
        self._base: dict[str, str] = {}

    def build(self, policy: Policy, overrides: Mapping[str, str] | None = None) -> dict[str, str]:
        """The complete environment for a command under ``policy`` (see ``build_command_env``)."""
        parent = os.environ if self._parent is None else self._parent
        # os.environ keeps its raw (encoded) items in `_data`: comparing those decodes nothing.
        raw = getattr(parent, "_data", None) if self._parent is None else None
        current: Mapping[Any, Any] = raw if isinstance(raw, dict) else parent
        if policy is not self._policy or current != self._seen:
            self._base = build_command_env(policy, parent)
            self._policy, self._seen = policy, dict(current)
        env = dict(self._base)
        if overrides:
            env.update(overrides)
        return env
