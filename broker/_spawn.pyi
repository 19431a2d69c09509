from collections.abc import Sequence

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
) -> int:
    """Start ``argv`` in a new session, its cgroups and Landlock domain; return its pid.

    stderr goes to ``stdout_fd`` unless ``stderr_fd`` is given. ``cgroup_dir_fd`` (a cgroup v2
    directory, ``O_PATH`` is enough) is entered as the process is created, by
    ``clone3(CLONE_INTO_CGROUP)`` where the kernel allows, else by a write to its ``cgroup.procs``
    in the child; ``cgroup_fds`` are ``cgroup.procs`` files the child writes itself into.

    Raises:
        OSError: a step failed; ``filename`` names it (``cgroup``, ``setsid``, ``fds``, ``cwd``,
            ``no_new_privs``, ``landlock``, ``exec``, ``signals``), or is None when no process
            could be created at all.
    """

def clone3_enabled() -> bool:
    """Whether :func:`spawn` uses clone3 for a ``cgroup_dir_fd``: false on arches without the
    trampoline (only x86_64 has one), once the kernel refused it, or when disabled."""

def set_clone3_enabled(enabled: bool) -> None:
    """Use (or stop using) clone3; enabling tries the kernel again. For tests and diagnosis."""
