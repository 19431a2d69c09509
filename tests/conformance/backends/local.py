"""The ``local:`` backend (the broker core in process), once per resolver strategy."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from broker import Broker
from tests.conformance._workspace import DiskWorkspace


def _opener(resolver: str):  # type: ignore[no-untyped-def]
    @contextlib.asynccontextmanager
    async def open_local(tmp_path: Path) -> AsyncIterator[DiskWorkspace]:
        root, outside = DiskWorkspace.create_dirs(tmp_path)
        async with Broker(root, resolver=resolver) as broker:
            yield DiskWorkspace(broker, root, outside)

    return open_local


VARIANTS = {
    "local-openat2": _opener("openat2"),
    "local-walk": _opener("walk"),
}
