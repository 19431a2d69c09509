"""gRPC tests share one event loop for the session.

grpc.aio's completion queue outlives a call by a few events (channel and server shutdown tags);
with a fresh loop per test, such a late event for the previous test's closed loop is reported as
"Event loop is closed" in whichever test runs next. anyio keeps its test loop alive while an
async fixture holds it, so a session-scoped async fixture keeps one loop for every test here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import broker  # noqa: F401  (first: it configures gRPC's fork handling before grpc is imported)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session", autouse=True)
async def _one_event_loop(anyio_backend: str) -> AsyncIterator[None]:
    yield
