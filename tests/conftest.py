"""Test-wide set-up: every ``async def`` test runs on asyncio through anyio's pytest plugin."""

from __future__ import annotations

import functools
import inspect

import anyio.pytest_plugin
import pytest

# anyio's plugin asks for the available backends once per collected test; without trio installed
# each ask re-imports (and pytest re-rewrites) anyio's trio backend module, ~0.1 s per async test.
anyio.pytest_plugin.get_available_backends = functools.cache(  # type: ignore[attr-defined]
    anyio.pytest_plugin.get_available_backends  # type: ignore[attr-defined]
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


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
