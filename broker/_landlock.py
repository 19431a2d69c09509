"""A Landlock sandbox for commands: writes only under the root and a private temp directory.

Landlock is an unprivileged Linux security module (5.13+). A process restricts itself and all its
future descendants, irrevocably; the kernel checks every access on the *resolved* object, so
symlinks, ``..`` and races cannot lead a write outside the allowed trees. We enter it between fork
and exec of each command, so the broker itself stays unrestricted.

What a sandboxed command may do:

- read, write, create, remove, rename and execute under the workspace root, the private temp dir
  and any ``sandbox.write`` directory;
- read and execute under the system directories of ``sandbox.read`` (``/usr``, ``/etc``, ...);
- read ``/dev/zero``, ``/dev/urandom`` and the like, and write ``/dev/null`` (no other device:
  not a disk, not ``/dev/shm``);
- nothing else on the filesystem: not ``$HOME``, not ``/tmp``, not a symlink or a hard link that
  *is created* from inside the root towards the outside;
- with ABI >= 6 (Linux 6.12), not signal any process outside its own sandbox (the broker, other
  commands) and not connect to abstract UNIX sockets outside it.

Not confined (kernel limits, see ``docs/security-model.md``): metadata changes (chmod, chown,
utime, xattr), network access unless an ABI >= 4 network rule is added (we add none), reading
with a file descriptor inherited from the broker, and a hard link into the root that already
existed before the command ran.

ABI versions: 1 (5.13) filesystem; 2 (5.19) ``REFER`` (rename/link across directories; denied
before it); 3 (6.2) ``TRUNCATE``; 4 (6.7) TCP; 5 (6.10) ``IOCTL_DEV``; 6 (6.12) scopes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import platform
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from operations import DEFAULT_SANDBOX_READ, Policy

__all__ = [
    "Rule",
    "Ruleset",
    "Sandbox",
    "SandboxUnavailable",
    "has_cap_sys_admin",
    "landlock_abi",
    "plan_rules",
    "sandbox_status",
]

# -- kernel interface (include/uapi/linux/landlock.h) -----------------------------------------

SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
"""The same numbers on every architecture: they were added after the syscall tables unified."""

LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
LANDLOCK_RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38
CAP_SYS_ADMIN = 21

ACCESS_FS_EXECUTE = 1 << 0
ACCESS_FS_WRITE_FILE = 1 << 1
ACCESS_FS_READ_FILE = 1 << 2
ACCESS_FS_READ_DIR = 1 << 3
ACCESS_FS_REMOVE_DIR = 1 << 4
ACCESS_FS_REMOVE_FILE = 1 << 5
ACCESS_FS_MAKE_CHAR = 1 << 6
ACCESS_FS_MAKE_DIR = 1 << 7
ACCESS_FS_MAKE_REG = 1 << 8
ACCESS_FS_MAKE_SOCK = 1 << 9
ACCESS_FS_MAKE_FIFO = 1 << 10
ACCESS_FS_MAKE_BLOCK = 1 << 11
ACCESS_FS_MAKE_SYM = 1 << 12
ACCESS_FS_REFER = 1 << 13  # ABI 2
ACCESS_FS_TRUNCATE = 1 << 14  # ABI 3
ACCESS_FS_IOCTL_DEV = 1 << 15  # ABI 5

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

SIGNAL_SCOPING_ABI = 6

READ = ACCESS_FS_EXECUTE | ACCESS_FS_READ_FILE | ACCESS_FS_READ_DIR
"""Rights on a read-only tree: list, read, execute."""

FILE_RIGHTS = (
    ACCESS_FS_EXECUTE
    | ACCESS_FS_WRITE_FILE
    | ACCESS_FS_READ_FILE
    | ACCESS_FS_TRUNCATE
    | ACCESS_FS_IOCTL_DEV
)
"""The only rights a rule on a single file (not a directory) may carry."""

WRITABLE_DEVICES = ("/dev/null",)
"""Devices a command may open for writing (``cmd > /dev/null``)."""

READABLE_DEVICES = ("/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
"""Devices a command may read. Not the rest of ``/dev``: a broker running as root would otherwise
let a command read a whole disk (``/dev/sda``) past every other rule."""


def handled_access(abi: int) -> int:
    """Every filesystem right the kernel of Landlock ``abi`` knows (all of them are restricted)."""
    if abi < 1:
        return 0
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= ACCESS_FS_REFER
    if abi >= 3:
        rights |= ACCESS_FS_TRUNCATE
    if abi >= 5:
        rights |= ACCESS_FS_IOCTL_DEV
    return rights


def scopes(abi: int) -> int:
    """The IPC scopes applied at ``abi``: signals and abstract UNIX sockets from ABI 6."""
    return SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET if abi >= SIGNAL_SCOPING_ABI else 0


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _syscall(number: int, *args: object) -> int:
    function = _libc().syscall
    function.restype = ctypes.c_long
    result = int(function(ctypes.c_long(number), *args))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def has_cap_sys_admin() -> bool:
    """Whether this process has ``CAP_SYS_ADMIN`` (then Landlock does not need no_new_privs)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> CAP_SYS_ADMIN & 1)
    except OSError:
        pass
    return False


class SandboxUnavailable(RuntimeError):
    """The policy requires Landlock and this kernel cannot provide it: refuse to run."""


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, or 0 when it has none (not Linux, not built in, or
    disabled at boot). ``/sys/kernel/security/lsm`` may not list Landlock even when it works;
    the ``LANDLOCK_CREATE_RULESET_VERSION`` query is what counts."""
    if platform.system() != "Linux":
        return 0
    try:
        return _syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
            return 0
        raise


# -- the plan: pure data ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rule:
    """Allow ``access`` (Landlock rights) beneath ``path``."""

    path: str
    access: int


def plan_rules(
    abi: int,
    *,
    write: Iterable[str],
    read: Iterable[str] = DEFAULT_SANDBOX_READ,
) -> list[Rule]:
    """The rules for a command: every handled right under each ``write`` directory, read and
    execute under each ``read`` one, read/write of :data:`WRITABLE_DEVICES` and read of
    :data:`READABLE_DEVICES`."""
    everything = handled_access(abi)
    rules = [Rule(path, everything) for path in write]
    rules += [Rule(path, READ & everything) for path in read]
    device = (ACCESS_FS_READ_FILE | ACCESS_FS_WRITE_FILE | ACCESS_FS_TRUNCATE) & everything
    rules += [Rule(path, device) for path in WRITABLE_DEVICES]
    rules += [Rule(path, ACCESS_FS_READ_FILE) for path in READABLE_DEVICES]
    return rules


# -- applying it ------------------------------------------------------------------------------


def _create_ruleset(abi: int, rules: Sequence[Rule], *, handle_fs: bool, scoped: int) -> int:
    attr = _RulesetAttr(handled_access(abi) if handle_fs else 0, 0, scoped)
    size = ctypes.sizeof(attr)
    fd = _syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    try:
        for rule in rules:
            try:
                path_fd = os.open(rule.path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue  # e.g. /lib32 on a distribution without it
            try:
                access = rule.access
                if not os.path.isdir(rule.path):
                    access &= FILE_RIGHTS
                beneath = _PathBeneathAttr(access, path_fd)
                _syscall(
                    SYS_LANDLOCK_ADD_RULE,
                    ctypes.c_int(fd),
                    ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
                    ctypes.byref(beneath),
                    ctypes.c_uint32(0),
                )
            finally:
                os.close(path_fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


class Ruleset:
    """A Landlock ruleset built in the broker and entered by each command between fork and exec.

    The broker does the work (opening the allowed paths, adding rules); entering it takes only
    two system calls, ``prctl(PR_SET_NO_NEW_PRIVS)`` and ``landlock_restrict_self``: the process
    manager's native spawner makes them in the child (:meth:`entry`), and :meth:`preexec` makes
    them from Python for a ``preexec_fn`` (only in a process without other threads: Python in a
    forked child of a threaded process can deadlock). Each entry makes a new Landlock domain, so one object
    serves any number of commands, each in a domain of its own.

    Args:
        rules: what is allowed; with ``handle_fs`` every other filesystem access is denied.
        handle_fs: restrict the filesystem (false: a ruleset that only scopes IPC).
        scope: apply the IPC scopes of the ABI (signals, abstract UNIX sockets; ABI >= 6).
        abi: the Landlock ABI to build for (default: the kernel's).
        no_new_privs: set ``PR_SET_NO_NEW_PRIVS`` before entering (set-uid programs then gain
            nothing). The kernel requires it unless the caller has ``CAP_SYS_ADMIN``; false is
            honoured only then.

    Raises:
        SandboxUnavailable: the kernel has no Landlock (fail closed: nothing this object would
            have confined runs unconfined because of it).
    """

    def __init__(
        self,
        rules: Sequence[Rule],
        *,
        handle_fs: bool = True,
        scope: bool = True,
        abi: int | None = None,
        no_new_privs: bool = True,
    ) -> None:
        self._fd = -1
        self.abi = landlock_abi() if abi is None else abi
        if self.abi < 1:
            raise SandboxUnavailable(
                "sandbox: this kernel has no Landlock (Linux 5.13+ with landlock in the lsm= "
                "boot list), so commands cannot be confined; set sandbox.mode = 'none' to run "
                "them without it"
            )
        self.rules = list(rules)
        self.scoped = scopes(self.abi) if scope else 0
        self._fd = _create_ruleset(self.abi, self.rules, handle_fs=handle_fs, scoped=self.scoped)
        self._pid = os.getpid()
        self._no_new_privs = no_new_privs or not has_cap_sys_admin()
        libc = _libc()
        self._prctl = libc.prctl
        self._raw_syscall = libc.syscall
        self._raw_syscall.restype = ctypes.c_long

    @property
    def signal_scoping(self) -> bool:
        """Whether a process in this ruleset cannot signal anything outside it."""
        return bool(self.scoped & SCOPE_SIGNAL)

    def entry(self) -> tuple[int, bool]:
        """The ruleset fd and whether to set ``no_new_privs`` first, for a spawner that enters
        the ruleset in the child itself (:mod:`broker._spawn`).

        Raises:
            OSError: the ruleset is closed (a command must then not start, rather than run bare).
        """
        if self._fd < 0:
            raise OSError(errno.EBADF, "sandbox is closed")
        return self._fd, self._no_new_privs

    def preexec(self) -> None:
        """Restrict the calling thread (a forked child before exec, or a thread about to spawn
        one) and its future children to a new domain of this ruleset.

        Raises:
            OSError: a system call failed; the child then never runs the program.
        """
        if self._fd < 0:
            raise OSError(errno.EBADF, "sandbox is closed")
        if self._no_new_privs and self._prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            code = ctypes.get_errno()
            raise OSError(code, "prctl(PR_SET_NO_NEW_PRIVS): " + os.strerror(code))
        result = self._raw_syscall(
            ctypes.c_long(SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(self._fd), ctypes.c_uint32(0)
        )
        if result != 0:
            code = ctypes.get_errno()
            raise OSError(code, "landlock_restrict_self: " + os.strerror(code))

    def close(self) -> None:
        """Release the ruleset. Idempotent."""
        if self._fd >= 0 and os.getpid() == self._pid:
            os.close(self._fd)
        self._fd = -1

    def __del__(self) -> None:
        if getattr(self, "_fd", -1) >= 0:
            self.close()


class Sandbox(Ruleset):
    """The command sandbox: write under ``root``, ``tmpdir`` and ``write``; read and execute
    under ``read``; signals and abstract sockets scoped (ABI >= 6). With ``read_only`` the root
    is only read and executed from, so a read-only policy binds commands too::

        sandbox = Sandbox(root, tmpdir)
        manager = ProcessManager(sandbox=sandbox)  # each command enters it between fork and exec

    Raises:
        SandboxUnavailable: the kernel has no Landlock.
        OSError: ``root``, ``tmpdir`` or a ``write`` directory does not exist.
    """

    def __init__(
        self,
        root: str,
        tmpdir: str,
        *,
        read: Iterable[str] = DEFAULT_SANDBOX_READ,
        write: Iterable[str] = (),
        read_only: bool = False,
        abi: int | None = None,
    ) -> None:
        self._owned_tmp = False
        self.root = root
        self.tmpdir = tmpdir
        self.read_only = read_only
        writable = [tmpdir, *write] if read_only else [root, tmpdir, *write]
        for path in [root, *writable]:
            os.stat(path)  # a missing writable directory is an error, never silently dropped
        readable = [root, *read] if read_only else list(read)
        abi = landlock_abi() if abi is None else abi
        super().__init__(plan_rules(abi, write=writable, read=readable), abi=abi)

    def env(self) -> dict[str, str]:
        """Variables pointing temporary files at the private temp directory."""
        return {"TMPDIR": self.tmpdir, "TMP": self.tmpdir, "TEMP": self.tmpdir}

    def close(self) -> None:
        """Release the ruleset (and the temp directory :meth:`for_policy` made). Idempotent."""
        if self._fd >= 0 and os.getpid() == self._pid and self._owned_tmp:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
        super().close()

    @classmethod
    def for_policy(cls, policy: Policy, root: str) -> Sandbox | None:
        """The sandbox ``policy`` asks for around commands in ``root``, with a new private temp
        directory (removed by :meth:`close`), or ``None`` when it asks for none.

        Raises:
            SandboxUnavailable: ``sandbox.mode`` is ``"landlock"`` and the kernel has none.
        """
        status = sandbox_status(policy)
        if not status["active"]:
            return None
        tmpdir = tempfile.mkdtemp(prefix="opsbroker-cmd-")
        try:
            sandbox = cls(
                root,
                tmpdir,
                read=policy.sandbox.read,
                write=policy.sandbox.write,
                read_only=policy.read_only,
            )
        except BaseException:
            shutil.rmtree(tmpdir, ignore_errors=True)
            raise
        sandbox._owned_tmp = True
        return sandbox


def sandbox_status(policy: Policy, abi: int | None = None) -> dict[str, object]:
    """What capabilities report about the command sandbox, checked at broker start.

    Returns ``{"mode", "active", "landlock_abi", "signal_scoping"}``.

    Raises:
        SandboxUnavailable: ``sandbox.mode`` is ``"landlock"`` but the kernel has no Landlock
            (fail closed: the broker refuses to start rather than run commands unsandboxed).
    """
    abi = landlock_abi() if abi is None else abi
    mode = policy.sandbox.mode
    if mode == "landlock" and abi < 1:
        raise SandboxUnavailable(
            "policy sandbox.mode = 'landlock' requires Landlock, but this kernel does not offer "
            "it (Linux 5.13+ with landlock enabled at boot); use sandbox.mode = 'auto' to run "
            "commands unsandboxed where it is missing, or 'none'"
        )
    active = mode != "none" and abi >= 1
    return {
        "mode": mode,
        "active": active,
        "landlock_abi": abi,
        "signal_scoping": active and abi >= SIGNAL_SCOPING_ABI,
    }
