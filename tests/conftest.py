"""Test-wide set-up: every ``async def`` test runs on asyncio through anyio's pytest plugin, on
one event loop for the whole session.

One loop, because grpc.aio's completion queue outlives a call by a few events (channel and server
shutdown tags): with a fresh loop per test, such a late event for the previous test's closed loop
is reported as "Event loop is closed" in whichever test runs next. anyio keeps its test loop
alive while an async fixture holds it, so a session-scoped async fixture keeps one loop.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator

import anyio.pytest_plugin
import pytest

# anyio's plugin asks for the available backends once per collected test; without trio installed
# each ask re-imports (and pytest re-rewrites) anyio's trio backend module, ~0.1 s per async test.
anyio.pytest_plugin.get_available_backends = functools.cache(  # type: ignore[attr-defined]
    anyio.pytest_plugin.get_available_backends  # type: ignore[attr-defined]
)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session", autouse=True)
async def _one_event_loop(anyio_backend: str) -> AsyncIterator[None]:
    yield


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> None:
    # Mark at collection time, before the test is parametrised: anyio's plugin replaces items
    # marked later (dropping their other parameters, e.g. the conformance ``ws`` backends).
    if inspect.iscoroutinefunction(obj) and name.startswith("test"):
        pytest.mark.usefixtures("anyio_backend")(obj)
        pytest.mark.anyio(obj)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        function = getattr(item, "function", None)
        if function is not None and inspect.iscoroutinefunction(function):
            item.add_marker(pytest.mark.anyio)
