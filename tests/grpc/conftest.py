"""gRPC tests (they share the session's one event loop, set up in tests/conftest.py)."""

from __future__ import annotations

import broker  # noqa: F401  (first: it configures gRPC's fork handling before grpc is imported)
