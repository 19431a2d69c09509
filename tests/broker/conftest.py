"""Process-manager fixtures: every test runs with a per-command cgroup (where this host has a
writable cgroup v2 tree) and with the fallback forced (process group, subreaper, /proc sweep)."""

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
MODES = ["cgroup", "fallback"] if CGROUPS else ["fallback"]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def manager(mode: str) -> AsyncIterator[ProcessManager]:
    pm = ProcessManager(use_cgroups=mode == "cgroup", kill_grace=TEST_KILL_GRACE_S)
    try:
        yield pm
    finally:
        await pm.aclose()
