"""Landlock signal scoping: a command may signal its own processes, never the broker.

A new session and process group stop ``kill 0`` and SIGIO tricks from reaching the broker, but a
process of the same user can still ``kill $PPID``. Landlock's ``LANDLOCK_SCOPE_SIGNAL`` (ABI 6,
Linux 6.12) denies signals from a sandboxed process to any process outside its Landlock domain, so
the command's tree can signal itself and nothing else. This ruleset handles no filesystem or
network access: it only scopes signals. The policy's command sandbox (:class:`~broker._landlock.Sandbox`)
scopes signals as well, so a process manager with a sandbox uses that one instead.

The ruleset fd is created once in the broker (by :mod:`broker._landlock`). Each command enters
it in its own child between fork and exec (:mod:`broker._spawn`), so each command gets a domain of
its own and the broker stays outside.
"""

from __future__ import annotations

from ._landlock import SIGNAL_SCOPING_ABI, Ruleset, landlock_abi

__all__ = ["signal_scope"]


def signal_scope() -> Ruleset | None:
    """A ruleset that only scopes signals, or ``None`` where the kernel lacks signal scoping.

    ``no_new_privs`` is set on entry only when the broker lacks ``CAP_SYS_ADMIN`` (the kernel
    requires it then), so a broker running as root keeps set-uid programs working in commands.
    """
    try:
        abi = landlock_abi()
    except OSError:
        return None
    if abi < SIGNAL_SCOPING_ABI:
        return None
    try:
        return Ruleset([], handle_fs=False, abi=abi, no_new_privs=False)
    except OSError:
        return None
