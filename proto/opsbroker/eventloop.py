"""The event loop ``opsbroker``'s commands run on: uvloop, or asyncio's own when asked.

A broker's work per call is small and its event loop turns several times for each: reading the
request, the command's pipes and pidfd, writing the reply. On asyncio's pure-Python selector loop
those turns are a large part of what a call costs; uvloop (libuv, in C) runs the same callbacks
for less: broker CPU per ``exec("true")`` fell to 0.68-0.81x over both transports
(``scripts/bench_ssh.py exec_cpu``, docs/performance.md). The library itself never picks a loop:
a broker or backend embedded in an application runs on whatever loop that application runs.

``OPSBROKER_EVENT_LOOP=asyncio`` runs the commands on asyncio's loop instead (the same code, for
comparison or should uvloop misbehave somewhere); ``uvloop``, the default, falls back to asyncio's
loop where uvloop is not installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

__all__ = ["ENV_VAR", "LOOPS", "EventLoopError", "loop_factory", "run"]

ENV_VAR: Final = "OPSBROKER_EVENT_LOOP"
LOOPS: Final = ("uvloop", "asyncio")

T = TypeVar("T")


class EventLoopError(ValueError):
    """``OPSBROKER_EVENT_LOOP`` names no loop this process can run."""


def loop_factory(name: str | None = None) -> Callable[[], asyncio.AbstractEventLoop]:
    """What creates the loop ``name`` (one of :data:`LOOPS`), by default the one
    ``OPSBROKER_EVENT_LOOP`` asks for, else uvloop; uvloop falls back to asyncio's loop where it
    is not installed.

    Raises:
        EventLoopError: ``name`` (or the variable) names neither loop.
    """
    wanted = name or os.environ.get(ENV_VAR, "").strip() or "uvloop"
    if wanted not in LOOPS:
        raise EventLoopError(
            f"{ENV_VAR}={wanted!r} names no event loop; use one of {', '.join(LOOPS)}"
        )
    if wanted == "uvloop":
        with contextlib.suppress(ImportError):
            import uvloop

            return uvloop.new_event_loop
    return asyncio.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a new loop from :func:`loop_factory`, as ``asyncio.run``.

    Raises:
        EventLoopError: ``OPSBROKER_EVENT_LOOP`` names neither loop (``main`` is not run).
    """
    try:
        factory = loop_factory()
    except EventLoopError:
        main.close()
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
