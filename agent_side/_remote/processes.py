"""``RemoteProcesses``: :class:`~operations.ProcessOperations` over the wire, for either transport.

The gRPC and SSH clients differ only in how one call travels; each hands in a ``unary`` and a
``stream`` function, and this class builds the requests and reads the replies of the process RPCs.
"""

from __future__ import annotations

import signal as signals
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Protocol, TypeVar

from google.protobuf.message import Message as ProtoMessage
from opsbroker.v1 import broker_pb2 as pb
from opsbroker.v1.codec import output_from_wire, process_from_wire, pty_to_wire

from operations import (
    InvalidArgument,
    ProcessInfo,
    ProcessOutput,
    PtySize,
    check_timeout,
)

__all__ = ["OPS", "RemoteProcesses", "Stream", "Unary"]

OPS = {
    "StartProcess": "start_process",
    "AttachProcess": "attach_process",
    "WriteStdin": "write_stdin",
    "CloseStdin": "close_stdin",
    "SignalProcess": "signal_process",
    "ResizeProcess": "resize_process",
    "ListProcesses": "list_processes",
    "WaitProcess": "wait_process",
    "KillProcess": "kill_process",
}
"""The operation each process RPC names in errors (as the broker names it)."""

M = TypeVar("M", bound=ProtoMessage)


class Unary(Protocol):
    def __call__(
        self,
        method: str,
        request: ProtoMessage,
        reply: type[M],
        path: str | None,
        *,
        long: bool = False,
    ) -> Awaitable[M]:
        """One call and its one reply; ``long``: no deadline (a wait lasts as the process)."""
        ...


class Stream(Protocol):
    def __call__(
        self, method: str, request: ProtoMessage, reply: type[M], path: str | None
    ) -> AsyncIterator[M]:
        """One call and its replies until it ends, with no deadline (an attach follows a
        process for as long as it runs)."""
        ...


class RemoteProcesses:
    """The process RPCs of ``service Broker`` behind :class:`~operations.ProcessOperations`."""

    def __init__(self, unary: Unary, stream: Stream) -> None:
        self._unary = unary
        self._stream = stream

    async def _info(self, method: str, request: ProtoMessage, path: str | None) -> ProcessInfo:
        return process_from_wire(await self._unary(method, request, pb.ProcessInfo, path))

    async def start(
        self,
        command: str,
        cwd: str,
        *,
        env: Mapping[str, str] | None = None,
        pty: PtySize | None = None,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        backpressure: bool = False,
    ) -> ProcessInfo:
        request = pb.StartProcessRequest(
            command=command,
            cwd=cwd,
            env=dict(env or {}),
            timeout=check_timeout(timeout, "start_process", cwd),
            idle_timeout=check_timeout(idle_timeout, "start_process", cwd),
            backpressure=backpressure,
        )
        if pty is not None:
            _check_size("start_process", pty.cols, pty.rows)
            request.pty.CopyFrom(pty_to_wire(pty))
        return await self._info("StartProcess", request, cwd)

    async def attach(self, id: str, *, from_offset: int = 0) -> AsyncIterator[ProcessOutput]:
        if from_offset < 0:
            raise InvalidArgument(
                "attach_process", id, f"`from_offset` must be >= 0, got {from_offset}"
            )
        request = pb.AttachProcessRequest(id=id, from_offset=from_offset)
        async for reply in self._stream("AttachProcess", request, pb.ProcessOutput, None):
            yield output_from_wire(reply)

    async def write_stdin(self, id: str, data: bytes) -> None:
        await self._unary("WriteStdin", pb.WriteStdinRequest(id=id, data=data), pb.Empty, None)

    async def close_stdin(self, id: str) -> None:
        await self._unary("CloseStdin", pb.ProcessRequest(id=id), pb.Empty, None)

    async def signal(self, id: str, signal: int) -> None:
        if signal not in signals.valid_signals():
            raise InvalidArgument("signal_process", id, f"{signal!r} is not a signal number")
        await self._unary(
            "SignalProcess", pb.SignalProcessRequest(id=id, signal=signal), pb.Empty, None
        )

    async def resize(self, id: str, cols: int, rows: int) -> None:
        _check_size("resize_process", cols, rows, id)
        request = pb.ResizeProcessRequest(id=id, cols=cols, rows=rows)
        await self._unary("ResizeProcess", request, pb.Empty, None)

    async def list_processes(self) -> list[ProcessInfo]:
        reply = await self._unary("ListProcesses", pb.Empty(), pb.ProcessList, None)
        return [process_from_wire(info) for info in reply.processes]

    async def wait(self, id: str) -> ProcessInfo:
        reply = await self._unary(
            "WaitProcess", pb.ProcessRequest(id=id), pb.ProcessInfo, None, long=True
        )
        return process_from_wire(reply)

    async def kill(self, id: str) -> ProcessInfo:
        return await self._info("KillProcess", pb.ProcessRequest(id=id), None)


MAX_CELLS = 65535  # a terminal side fits the kernel's unsigned short


def _check_size(op: str, cols: int, rows: int, id: str | None = None) -> None:
    if not (0 < cols <= MAX_CELLS and 0 < rows <= MAX_CELLS):
        raise InvalidArgument(op, id, f"a terminal size is 1..{MAX_CELLS} cells, got {cols}x{rows}")
