"""Test-wide set-up: every ``async def`` test runs on asyncio through anyio's pytest plugin, on
one event loop for the whole session: uvloop, or asyncio's own with ``OPSBROKER_TEST_LOOP=asyncio``.

One loop, because grpc.aio's completion queue outlives a call by a few events (channel and server
shutdown tags): with a fresh loop per test, such a late event for the previous test's closed loop
is reported as "Event loop is closed" in whichever test runs next. anyio keeps its test loop
alive while an async fixture holds it, so a session-scoped async fixture keeps one loop.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import AsyncIterator

import anyio.pytest_plugin
import pytest
from opsbroker import eventloop, grpccore

# anyio's plugin asks for the available backends once per collected test; without trio installed
# each ask re-imports (and pytest re-rewrites) anyio's trio backend module, ~0.1 s per async test.
anyio.pytest_plugin.get_available_backends = functools.cache(  # type: ignore[attr-defined]
    anyio.pytest_plugin.get_available_backends  # type: ignore[attr-defined]
)


TEST_LOOP = os.environ.get("OPSBROKER_TEST_LOOP", "uvloop")
"""The loop every async test runs on: uvloop, as the ``opsbroker`` commands, or ``asyncio``'s,
as most programs that embed a broker or a backend (``scripts/test`` runs both). With uvloop grpc
runs with the commands' settings too (:mod:`opsbroker.grpccore`), with asyncio's loop with grpc's
own defaults, as an embedding program's: the suite covers both."""

if TEST_LOOP == "uvloop" and not grpccore.configure():
    raise pytest.UsageError("grpc was imported before tests/conftest.py could configure it")


@pytest.fixture(scope="session")
def anyio_backend() -> tuple[str, dict[str, object]]:
    if TEST_LOOP not in eventloop.LOOPS:
        raise pytest.UsageError(
            f"OPSBROKER_TEST_LOOP={TEST_LOOP!r}: use one of {', '.join(eventloop.LOOPS)}"
        )
    return ("asyncio", {"use_uvloop": TEST_LOOP == "uvloop"})


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
