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
    """Mark coroutine tests for anyio while they are collected, so that anyio adds its
    ``anyio_backend`` fixture then. (Marking them later, in ``pytest_collection_modifyitems``,
    makes anyio re-create each item and drop its ``parametrize`` ids and fixture params.)"""
    is_test_class = isinstance(collector, pytest.Class | pytest.Module)
    if inspect.iscoroutinefunction(obj) and is_test_class and collector.istestfunction(obj, name):
        pytest.mark.anyio(obj)
