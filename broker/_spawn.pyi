from collections.abc import Sequence
from typing import Literal

def spawn(
    executables: Sequence[bytes],
    argv: Sequence[bytes],
    env: Sequence[bytes],
    *,
    stdin_fd: int,
    stdout_fd: int,
    stderr_fd: int = -1,
    cwd_fd: int = -1,
    cgroup_fds: Sequence[int] = (),
    cgroup_dir_fd: int = -1,
    ruleset_fd: int = -1,
    no_new_privs: bool = False,
    controlling_tty: bool = False,
) -> int:
    """Start ``argv`` in a new session, its cgroups and Landlock domain; return its pid.

    stderr goes to ``stdout_fd`` unless ``stderr_fd`` is given. ``cgroup_dir_fd`` (a cgroup v2
    directory, ``O_PATH`` is enough) is entered as the process is created, by
    ``clone3(CLONE_INTO_CGROUP)`` where the kernel allows, else by a write to its ``cgroup.procs``
    in the child; ``cgroup_fds`` are ``cgroup.procs`` files the child writes itself into.
    ``controlling_tty``: ``stdin_fd`` is a terminal (a PTY's slave) that becomes the new
    session's controlling terminal (``TIOCSCTTY``), so job control and ``^C`` work inside.

    Raises:
        OSError: a step failed; ``filename`` names it (``cgroup``, ``setsid``, ``fds``, ``tty``, ``cwd``,
            ``no_new_privs``, ``landlock``, ``exec``, ``signals``), or is None when no process
            could be created at all.
    """

def clone3_status() -> Literal["untried", "works", "refused", "disabled"]:
    """How :func:`spawn` creates children given a ``cgroup_dir_fd``: ``untried`` (clone3 at the
    next one), ``works`` (clone3), ``refused`` (vfork: the kernel refused clone3, or this arch has
    no trampoline; only x86_64 has one) or ``disabled`` (vfork, by :func:`set_clone3_enabled`)."""

def set_clone3_enabled(enabled: bool) -> None:
    """Use (or stop using) clone3; enabling tries the kernel again. For tests and diagnosis."""

def shared_table_status() -> Literal["untried", "works", "refused", "unavailable"]:
    """Whether clone3 children share the broker's descriptor table and unshare only the few
    descriptors they need (so a spawn costs the same however many the broker holds):
    ``untried``, ``works``, ``refused`` (a kernel before 5.9, without ``CLOSE_RANGE_UNSHARE``:
    each child copies the whole table) or ``unavailable`` (the low descriptors it needs were
    taken at import)."""
