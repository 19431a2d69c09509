"""Process-manager fixtures: every test runs with a per-command cgroup (where this host has a
writable cgroup v2 tree) and with the fallback forced (process group, subreaper, /proc sweep).

Modes: ``cgroup`` and ``fallback`` are the defaults (Landlock signal scoping where available:
each command enters a new domain between fork and exec); ``cgroup-unscoped`` and
``fallback-unscoped`` turn scoping off.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from broker._cgroup import CgroupTree
from broker._process import ProcessManager

TEST_KILL_GRACE_S = 0.2
"""Short SIGTERM grace so TERM-ignoring cases stay quick."""


def _cgroups_available() -> bool:
    tree = CgroupTree.create()
    if tree is None:
        return False
    tree.remove()
    return True


CGROUPS = _cgroups_available()
MODES = ["cgroup", "cgroup-unscoped"] if CGROUPS else []
MODES += ["fallback", "fallback-unscoped"]


def make_manager(mode: str, **options: object) -> ProcessManager:
    """A manager for ``mode`` (see the module docstring); ``options`` go to the constructor."""
    options.setdefault("kill_grace", TEST_KILL_GRACE_S)
    return ProcessManager(
        use_cgroups=mode.startswith("cgroup"),
        scope_signals=False if mode.endswith("-unscoped") else None,
        **options,  # type: ignore[arg-type]
    )


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def manager(mode: str) -> AsyncIterator[ProcessManager]:
    pm = make_manager(mode)
    try:
        yield pm
    finally:
        await pm.aclose()
