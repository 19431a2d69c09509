"""Cancellation: ``AbortController`` / ``AbortSignal``, and their bridge to task cancellation.

A tool receives an :class:`AbortSignal`; whoever runs the tool holds the :class:`AbortController`.
Operations accept the signal, but they must behave the same when the awaiting task is simply
cancelled: cancelling the task and aborting the signal both stop the work where it runs (kill the
command tree, cancel the RPC) before the call returns.

:func:`abort_scope` is the bridge. Inside it, aborting the signal cancels the enclosed block, and
the block ends with :class:`~operations.Aborted`; a task cancellation from outside still ends it
with :class:`asyncio.CancelledError`, as asyncio expects.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType

from ._errors import Aborted
from ._types import KillReason

__all__ = ["AbortController", "AbortSignal", "abort_scope"]

Listener = Callable[[], None]


class AbortSignal:
    """Read side of an abort: whether it happened, why, and a way to be told.

    Listeners run synchronously, once, in the thread that calls :meth:`AbortController.abort`;
    a listener added after the abort runs at once.
    """

    __slots__ = ("_aborted", "_event", "_listeners", "_reason")

    def __init__(self) -> None:
        self._aborted = False
        self._reason: object = None
        self._listeners: list[Listener] = []
        self._event: asyncio.Event | None = None

    @property
    def aborted(self) -> bool:
        return self._aborted

    @property
    def reason(self) -> object:
        """What was passed to :meth:`AbortController.abort`, or ``None``."""
        return self._reason

    @property
    def kill_reason(self) -> KillReason:
        """Why a command this signal stops is killed: the reason given to
        :meth:`AbortController.abort` when it is a :class:`~operations.KillReason` (``SHUTDOWN``,
        ``OUTPUT_LIMIT``), else ``ABORTED``. Backends report this in ``ExecResult.kill_reason``,
        so no layer above has to rewrite it."""
        reason = self._reason
        return reason if isinstance(reason, KillReason) else KillReason.ABORTED

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` when the signal aborts. Returns a function that removes it."""
        if self._aborted:
            listener()
            return lambda: None
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def throw_if_aborted(self, op: str, path: str | None = None) -> None:
        """Raise :class:`~operations.Aborted` for ``op`` if the signal has aborted."""
        if self._aborted:
            raise Aborted(op, path)

    async def wait(self) -> None:
        """Return once the signal has aborted."""
        if self._aborted:
            return
        if self._event is None:
            self._event = asyncio.Event()
        await self._event.wait()

    def _fire(self, reason: object) -> None:
        if self._aborted:
            return
        self._aborted = True
        self._reason = reason
        if self._event is not None:
            self._event.set()
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener()

    @staticmethod
    def aborted_signal(reason: object = None) -> AbortSignal:
        """A signal that has already aborted."""
        signal = AbortSignal()
        signal._fire(reason)
        return signal


class AbortController:
    """Write side of an abort: owns one :class:`AbortSignal` and fires it at most once."""

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: object = None) -> None:
        """Abort the signal. Later calls do nothing."""
        self.signal._fire(reason)


class abort_scope:
    """Async context manager: aborting ``signal`` cancels the enclosed block.

    ``async with abort_scope(signal, "exec"):`` runs the block; if the signal aborts (before or
    during it) the block is cancelled, its ``finally`` clauses run, and the scope raises
    :class:`~operations.Aborted` for ``op``. With ``signal=None`` the scope does nothing.

    **Cancellation:** a cancellation that did not come from the signal is left alone and
    propagates as :class:`asyncio.CancelledError`.
    """

    def __init__(self, signal: AbortSignal | None, op: str, path: str | None = None) -> None:
        self._signal = signal
        self._op = op
        self._path = path
        self._task: asyncio.Task[object] | None = None
        self._remove: Callable[[], None] | None = None
        self._cancelled_by_us = False
        self._cancelling = 0
        self._closed = False

    async def __aenter__(self) -> abort_scope:
        if self._signal is None:
            return self
        self._signal.throw_if_aborted(self._op, self._path)
        self._task = asyncio.current_task()
        if self._task is not None:
            self._cancelling = self._task.cancelling()
        loop = asyncio.get_running_loop()

        def on_abort() -> None:
            loop.call_soon_threadsafe(self._cancel)

        self._remove = self._signal.add_listener(on_abort)
        return self

    def _cancel(self) -> None:
        task = self._task
        if task is not None and not self._closed and not task.done() and not self._cancelled_by_us:
            self._cancelled_by_us = True
            task.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self._closed = True
        if self._remove is not None:
            self._remove()
            self._remove = None
        if not self._cancelled_by_us or self._task is None:
            return False
        # The signal cancelled us: swallow exactly that cancellation and report an abort instead
        # (the same bookkeeping asyncio.timeout does).
        if self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            raise Aborted(self._op, self._path) from None
        return False
