"""grpc core's settings for the ``opsbroker`` commands: environment variables grpc reads once, as
it is first imported, so :func:`configure` runs before anything imports grpc.

- ``GRPC_VERBOSITY=ERROR``: grpc core logs each failed TLS handshake (a client without a
  certificate) as an INFO line on stderr.
- ``GRPC_EXPERIMENTS=-event_engine_listener,-event_engine_client``: sockets a server accepts and
  a channel connects are served by grpc's polling engine (``epoll1``) instead of its EventEngine.
  On the engine, each message hops from the engine's poller and worker threads to the completion
  queue's poller thread, then to the event loop; with the polling engine the completion queue's
  poller reads the socket itself. Measured with grpcio 1.85 (``scripts/bench_ssh.py``, alternated
  with grpc's defaults; docs/performance.md): a bare echo round trip 0.36-0.38 ms against
  0.57-0.66 ms; per ``exec("true")`` the broker's CPU 0.87x (grpc's own threads under half), the
  client's 0.76x. The setting is applied only on the grpcio versions it was measured on
  (:data:`MEASURED_ON`): a later grpc may have dropped either engine.

A variable the operator set is kept as it is (``GRPC_EXPERIMENTS=`` keeps grpc's defaults). A
program that embeds a backend or a broker keeps grpc's defaults unless it calls :func:`configure`
first, or sets the variables itself. (``GRPC_ENABLE_FORK_SUPPORT=false`` is not here: it is a
fix, not a tuning, so ``broker`` and ``agent_side._remote`` set it as they are imported.)
"""

from __future__ import annotations

import os
import sys
from importlib import metadata
from typing import Final

__all__ = ["EXPERIMENTS", "MEASURED_ON", "configure"]

EXPERIMENTS: Final = "-event_engine_listener,-event_engine_client"
"""grpc core experiments turned off: the EventEngine's listener and client sockets."""

MEASURED_ON: Final = ("1.85.",)
"""Prefixes of the grpcio versions :data:`EXPERIMENTS` was measured on (and named in)."""


def configure() -> bool:
    """Set grpc core's variables for this process where the operator has not (module docstring).

    Returns:
        ``False`` if grpc was already imported: too late, nothing is set.
    """
    if "grpc" in sys.modules:
        return False
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    if _grpcio_version().startswith(MEASURED_ON):
        os.environ.setdefault("GRPC_EXPERIMENTS", EXPERIMENTS)
    return True


def _grpcio_version() -> str:
    try:
        return metadata.version("grpcio")
    except metadata.PackageNotFoundError:
        return ""
