"""Commands started with ``Run`` by the id their client chose, so that ``AbortRun`` can name them.

Shared by the gRPC front-end (keys are ``(principal, abort_id)``: one principal cannot abort
another's command) and the SSH service (one per connection, keys are the ``abort_id``). An abort
that overtakes its ``Run`` is remembered, within a bound, and the command then starts aborted.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

from operations import AbortController, InvalidArgument

__all__ = ["MAX_EARLY_ABORTS", "Runs"]

K = TypeVar("K", bound=Hashable)

MAX_EARLY_ABORTS = 1024
"""Aborts remembered for a ``Run`` not seen yet; the oldest go first."""


class Runs(Generic[K]):
    """The running commands that an abort can name, and the aborts that came first."""

    def __init__(self) -> None:
        self._running: dict[K, AbortController] = {}
        self._early: dict[K, None] = {}  # in arrival order

    @contextmanager
    def running(self, key: K, controller: AbortController, cwd: str) -> Iterator[None]:
        """Make ``key`` name ``controller`` while the block runs; abort it at once if its abort
        already arrived. Refuses a key that names a command still running."""
        if key in self._running:
            raise InvalidArgument(
                "exec", cwd, "`abort_id` names a command still running; pick a new one"
            )
        if key in self._early:
            del self._early[key]
            controller.abort("client")  # its AbortRun came first: it starts aborted
        self._running[key] = controller
        try:
            yield
        finally:
            del self._running[key]

    def abort(self, key: K) -> None:
        """Abort the command ``key`` names, or remember the abort for a ``Run`` to come."""
        controller = self._running.get(key)
        if controller is not None:
            controller.abort("client")
            return
        if len(self._early) >= MAX_EARLY_ABORTS:
            del self._early[next(iter(self._early))]
        self._early[key] = None
