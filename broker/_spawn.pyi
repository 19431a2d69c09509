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
    ruleset_fd: int = -1,
    no_new_privs: bool = False,
) -> int:
    """Start ``argv`` in a new session, its cgroups and Landlock domain; return its pid.

    stderr goes to ``stdout_fd`` unless ``stderr_fd`` is given.

    Raises:
        OSError: a step failed; ``filename`` names it (``cgroup``, ``setsid``, ``fds``, ``cwd``,
            ``no_new_privs``, ``landlock``, ``exec``, ``signals``).
    """
