"""The ``local:`` backend (the broker core in process), once per resolver strategy.

``local-openat2`` searches with confined ``rg`` where Landlock allows it (else the Python walk);
``local-walk`` always searches with the fd-based Python walk, so both engines run the suite.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from broker import Broker
from tests.conformance._workspace import DiskWorkspace

Opener = Callable[[Path], AbstractAsyncContextManager[DiskWorkspace]]


def _opener(resolver: str, search_engine: str) -> Opener:
    @contextlib.asynccontextmanager
    async def open_local(tmp_path: Path) -> AsyncIterator[DiskWorkspace]:
        root, outside = DiskWorkspace.create_dirs(tmp_path)
        async with Broker(root, resolver=resolver, search_engine=search_engine) as broker:
            yield DiskWorkspace(broker, root, outside)

    return open_local


VARIANTS = {
    "local-openat2": _opener("openat2", "auto"),
    "local-walk": _opener("walk", "python"),
}
