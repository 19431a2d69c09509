"""The ``local:`` backend (the broker core in process), once per resolver strategy and per way
of tracking a command's tree.

``local-openat2`` searches with confined ``rg`` where Landlock allows it (else the Python walk);
``local-walk`` always searches with the fd-based Python walk, so both engines run the suite.
Both track trees with cgroups where this host has a writable cgroup v2 tree; ``local-proc``
forces the fallback tracker (process group, subreaper, ``/proc`` sweep), so the process tests
run in both tracking modes.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from broker import Broker
from operations import ProcessPolicy
from tests.conformance._workspace import DiskWorkspace

Opener = Callable[..., AbstractAsyncContextManager[DiskWorkspace]]


def _opener(resolver: str, search_engine: str, use_cgroups: bool | None = None) -> Opener:
    @contextlib.asynccontextmanager
    async def open_local(
        tmp_path: Path, *, process_policy: ProcessPolicy | None = None
    ) -> AsyncIterator[DiskWorkspace]:
        root, outside = DiskWorkspace.create_dirs(tmp_path)
        async with Broker(
            root,
            resolver=resolver,
            search_engine=search_engine,
            process_policy=process_policy,
            use_cgroups=use_cgroups,
        ) as broker:
            yield DiskWorkspace(broker, root, outside)

    return open_local


VARIANTS = {
    "local-openat2": _opener("openat2", "auto"),
    "local-walk": _opener("walk", "python"),
    "local-proc": _opener("openat2", "auto", use_cgroups=False),
}
