"""``process.v1.ProcessService`` (sandboxd) over ``backend.processes``.

A thin adapter: every RPC is a call of the backend's :class:`~operations.ProcessOperations`
(the same ones our own ``StartProcess``/``AttachProcess`` use), behind the broker's policy and
audit as the caller's principal, so confinement of the cwd, the environment, the sandbox, the
lifetime limits, tree tracking and the one kill path are the core's, unchanged.

- ``Start``: ``start`` the argument vector (quoted for the shell, so it runs as given), send
  ``InitEvent`` with a small integer id, relay ``attach`` as ``stdout``/``stderr`` events, then
  ``wait`` and send ``ExitEvent``. The id names the process for ``WriteStdin``/``SendSignal``/
  ``ResizeTTY`` while the stream is open, for its caller only.
- ``Execute``: the same, collected into one reply (at most :data:`MAX_EXECUTE_OUTPUT` bytes).
- The exit code is the leader's (``128 + n`` when signal ``n`` ended it: ``ProcessInfo.signal``); ``-1`` when the broker
  killed the tree (timeout, idle timeout, shutdown), as sandboxd reports a killed command.

**Cancellation:** a client that cancels, passes its deadline or disappears gets its handler task
cancelled; the handler then kills the process's tree (``processes.kill``, the one kill path)
before the cancellation propagates. A gRPC deadline is also passed on as the process's
``timeout``, so the broker ends it even if the cancellation never arrives.
"""

from __future__ import annotations

import asyncio
import itertools
import shlex
import signal as _signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import grpc
import grpc.aio
from opsbroker.sandboxd import process_pb2 as pb
from opsbroker.sandboxd import process_pb2_grpc as pb_grpc

from operations import (
    Backend,
    InvalidArgument,
    NotFound,
    OpsError,
    OutputLimit,
    ProcessInfo,
    ProcessState,
    PtySize,
    Stream,
)

from ..._guard import Enforcement
from .._grpcwire import current_principal
from ._paths import workspace_path
from ._status import public_message, status_of

__all__ = ["MAX_EXECUTE_OUTPUT", "SERVICE_NAME", "ProcessServicer"]

SERVICE_NAME: Final = pb.DESCRIPTOR.services_by_name["ProcessService"].full_name

MAX_EXECUTE_OUTPUT: Final = 4 * 1024 * 1024 - 64 * 1024
"""Most stdout + stderr bytes one Execute returns: its reply must fit a client's default 4 MiB
message limit. A command that writes more is killed (``RESOURCE_EXHAUSTED``); use Start."""

EVENT_BYTES: Final = 64 * 1024  # output in one StartResponse, at most

KILLED_EXIT_CODE: Final = -1

SIGNALS: Final = {
    pb.SIGNAL_SIGINT: _signal.SIGINT,
    pb.SIGNAL_SIGTERM: _signal.SIGTERM,
    pb.SIGNAL_SIGKILL: _signal.SIGKILL,
}

Context = grpc.aio.ServicerContext[Any, Any]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Running:
    """A process a Start stream runs: its owner, its backend id and whether it has a PTY."""

    principal: str
    id: str
    pty: bool


def exit_code(info: ProcessInfo) -> int:
    """The ``exit_code`` a finished process reports on the wire (``128 + n`` for a signal, as
    sandboxd reports it)."""
    if info.state is ProcessState.EXITED and info.exit_code is not None:
        return info.exit_code
    if info.state is ProcessState.EXITED and info.signal is not None:
        return 128 + info.signal
    return KILLED_EXIT_CODE


class ProcessServicer(pb_grpc.ProcessServiceServicer):
    """``process.v1.ProcessService`` over ``backend.processes``.

    Args:
        backend: what does the work (the broker core, or any ``operations.Backend``).
        enforcement: the broker's policy and audit; each call runs behind it as its principal.
    """

    def __init__(self, backend: Backend, *, enforcement: Enforcement | None = None) -> None:
        self._backend = backend
        self._enforcement = enforcement
        self._ids = itertools.count(1)
        self._running: dict[int, _Running] = {}

    def _ops(self, context: Context) -> tuple[Backend, str]:
        principal = current_principal.get()
        if self._enforcement is None:
            return self._backend, principal
        guarded = self._enforcement.guard(
            self._backend, principal=principal, transport="sandboxd", peer=context.peer() or ""
        )
        return guarded, principal

    def _lookup(self, op: str, process_id: int, principal: str) -> _Running:
        running = self._running.get(process_id)
        if running is None or running.principal != principal:
            raise NotFound(op, str(process_id), f"process {process_id} not found")
        return running

    async def _call(self, context: Context, op: str, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work``, ending the call with the mapped status of an ``OpsError``."""
        try:
            return await work()
        except OpsError as exc:
            await context.abort(status_of(exc).grpc, public_message(exc, self._backend.root))
            raise  # unreachable: abort raises

    async def _start(
        self, ops: Backend, config: pb.ProcessConfig, context: Context, pty: PtySize | None
    ) -> ProcessInfo:
        if not config.command:
            raise InvalidArgument("start_process", None, "`config.command` must not be empty")
        cwd = workspace_path(ops.root, config.cwd if config.HasField("cwd") else "")
        remaining = context.time_remaining()
        return await ops.processes.start(
            shlex.join(config.command),
            cwd,
            env=dict(config.env_vars) or None,
            pty=pty,
            timeout=remaining if remaining is not None and remaining > 0 else None,
            backpressure=True,  # as sandboxd: a slow client slows the process, loses nothing
        )

    async def Start(self, request: pb.StartRequest, context: Context) -> None:
        ops, principal = self._ops(context)
        pty = None
        if request.HasField("pty"):
            pty = PtySize(request.pty.cols or 80, request.pty.rows or 24)

        async def start() -> ProcessInfo:
            return await self._start(ops, request.config, context, pty)

        info = await self._call(context, "start_process", start)
        process_id = next(self._ids)
        self._running[process_id] = _Running(principal, info.id, pty is not None)
        ended = False
        try:
            ended = await self._relay(ops, info.id, process_id, context)
        except OpsError as exc:
            await context.abort(status_of(exc).grpc, public_message(exc, self._backend.root))
        finally:
            self._running.pop(process_id, None)
            if not ended:
                await _kill(ops, info.id)

    async def _relay(self, ops: Backend, id: str, process_id: int, context: Context) -> bool:
        """Send the Start stream of process ``id``; ``True`` once its exit has been sent."""
        await context.write(pb.StartResponse(init=pb.InitEvent(process_id=process_id)))
        outputs = ops.processes.attach(id)
        try:
            async for output in outputs:
                data = output.data
                for begin in range(0, len(data), EVENT_BYTES):
                    piece = data[begin : begin + EVENT_BYTES]
                    if output.stream is Stream.STDERR:
                        await context.write(pb.StartResponse(stderr=piece))
                    else:
                        await context.write(pb.StartResponse(stdout=piece))
        finally:
            await outputs.aclose()  # type: ignore[attr-defined]
        final = await ops.processes.wait(id)
        await context.write(pb.StartResponse(exit=pb.ExitEvent(exit_code=exit_code(final))))
        return True

    async def Execute(self, request: pb.ExecuteRequest, context: Context) -> pb.ExecuteResponse:
        ops, _principal = self._ops(context)

        async def execute() -> pb.ExecuteResponse:
            info = await self._start(ops, request.config, context, None)
            ended = False
            try:
                out = {Stream.STDOUT: bytearray(), Stream.STDERR: bytearray()}
                total = 0
                async for output in ops.processes.attach(info.id):
                    total += len(output.data)
                    if total > MAX_EXECUTE_OUTPUT:
                        raise OutputLimit(
                            "exec",
                            None,
                            f"Execute returns at most {MAX_EXECUTE_OUTPUT} bytes of output; "
                            "the command was killed (use Start to stream its output)",
                        )
                    out[output.stream] += output.data
                final = await ops.processes.wait(info.id)
                ended = True
            finally:
                if not ended:
                    await _kill(ops, info.id)
            return pb.ExecuteResponse(
                exit_code=exit_code(final),
                stdout=bytes(out[Stream.STDOUT]),
                stderr=bytes(out[Stream.STDERR]),
            )

        return await self._call(context, "exec", execute)

    async def WriteStdin(
        self, request: pb.WriteStdinRequest, context: Context
    ) -> pb.WriteStdinResponse:
        ops, principal = self._ops(context)

        async def write() -> None:
            running = self._lookup("write_stdin", request.process_id, principal)
            if request.WhichOneof("payload") == "eof":
                await ops.processes.close_stdin(running.id)
            elif request.input:
                await ops.processes.write_stdin(running.id, request.input)

        await self._call(context, "write_stdin", write)
        return pb.WriteStdinResponse()

    async def SendSignal(
        self, request: pb.SendSignalRequest, context: Context
    ) -> pb.SendSignalResponse:
        ops, principal = self._ops(context)

        async def send() -> None:
            running = self._lookup("signal_process", request.process_id, principal)
            number = SIGNALS.get(request.signal)
            if number is None:
                raise InvalidArgument(
                    "signal_process",
                    str(request.process_id),
                    f"unsupported or unspecified signal {request.signal}; "
                    "send SIGINT, SIGTERM or SIGKILL",
                )
            await ops.processes.signal(running.id, int(number))

        await self._call(context, "signal_process", send)
        return pb.SendSignalResponse()

    async def ResizeTTY(
        self, request: pb.ResizeTTYRequest, context: Context
    ) -> pb.ResizeTTYResponse:
        ops, principal = self._ops(context)
        running = await self._call(
            context,
            "resize_process",
            _returning(lambda: self._lookup("resize_process", request.process_id, principal)),
        )
        if not running.pty:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"resize_process {request.process_id!r}: the process has no PTY "
                "(start it with `pty` to resize it)",
            )

        async def resize() -> None:
            await ops.processes.resize(running.id, request.cols, request.rows)

        await self._call(context, "resize_process", resize)
        return pb.ResizeTTYResponse()


def _returning(fn: Callable[[], T]) -> Callable[[], Awaitable[T]]:
    async def call() -> T:
        return fn()

    return call


async def _kill(ops: Backend, id: str) -> None:
    """Kill ``id``'s tree and wait for it, even while the calling task is being cancelled."""
    task = asyncio.ensure_future(ops.processes.kill(id))
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait({task})
        raise
    except OpsError:
        pass  # already gone (retention ended): nothing left to kill
