"""gRPC tests share one event loop for the session.

grpc.aio's completion queue outlives a call by a few events (channel and server shutdown tags);
with a fresh loop per test, such a late event for the previous test's closed loop is reported as
"Event loop is closed" in whichever test runs next.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"
