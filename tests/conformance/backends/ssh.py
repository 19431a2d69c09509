"""The ``ssh`` backend: the broker core served by the SSH front-end on loopback, reached through
the SSH client backend (keys and host key generated in the test's tmp directory)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from broker import Broker
from operations import ProcessPolicy
from tests.conformance._workspace import DiskWorkspace
from tests.ssh._harness import serve_over_ssh


@contextlib.asynccontextmanager
async def open_ssh(
    tmp_path: Path, *, process_policy: ProcessPolicy | None = None
) -> AsyncIterator[DiskWorkspace]:
    root, outside = DiskWorkspace.create_dirs(tmp_path)
    async with (
        Broker(root, process_policy=process_policy) as broker,
        serve_over_ssh(broker, tmp_path / "keys") as setup,
        setup.backend() as client,
    ):
        yield DiskWorkspace(client, root, outside)


VARIANTS = {"ssh": open_ssh}
