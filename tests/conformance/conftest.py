"""The backend registry of the conformance suite.

Each module in ``tests/conformance/backends/`` registers its backends in a dict
``VARIANTS: dict[str, Opener]``: a name (``"memory"``, ``"local-openat2"``, ...) and an async
context manager ``opener(tmp_path) -> Workspace``. Every test that takes the ``ws``
fixture then runs once per registered backend, with the same assertions.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from tests.conformance import backends
from tests.conformance._workspace import Workspace

Opener = Callable[[Path], AbstractAsyncContextManager[Workspace]]

BACKENDS: dict[str, Opener] = {}
for _info in sorted(pkgutil.iter_modules(backends.__path__), key=lambda m: m.name):
    _module = importlib.import_module(f"{backends.__name__}.{_info.name}")
    BACKENDS.update(_module.VARIANTS)


@pytest.fixture(params=sorted(BACKENDS))
async def ws(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Workspace]:
    async with BACKENDS[request.param](tmp_path) as workspace:
        yield workspace
