"""The broker tests' ``ws`` fixture: every registered conformance backend, as in the suite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conformance._workspace import Workspace
from tests.conformance.conftest import BACKENDS


@pytest.fixture(params=sorted(BACKENDS))
async def ws(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Workspace]:
    async with BACKENDS[request.param](tmp_path) as workspace:
        yield workspace
