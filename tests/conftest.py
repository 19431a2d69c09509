"""Test-wide set-up: every ``async def`` test runs on asyncio through anyio's pytest plugin."""

from __future__ import annotations

import inspect

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> None:
    # Mark coroutine tests while they are collected (not afterwards): anyio's plugin then sees
    # the mark before it builds the items, and parametrized async tests keep their parameters.
    if inspect.iscoroutinefunction(obj) and name.startswith("test"):
        pytest.mark.anyio(obj)
