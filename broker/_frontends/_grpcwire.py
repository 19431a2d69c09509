"""Shared pieces of the gRPC front-end: the one error-to-status table, the per-call scope that
maps errors and logs a line, the caller's principal, and tolerant request decoding.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextvars import ContextVar
from types import TracebackType
from typing import Any

import grpc
import grpc.aio
from opsbroker.v1 import broker_pb2 as pb
from opsbroker.v1.codec import ERROR_METADATA_KEY, error_to_wire

from operations import (
    Aborted,
    AlreadyExists,
    DirectoryNotEmpty,
    EscapesRoot,
    InvalidArgument,
    IsADirectory,
    NotADirectory,
    NotFound,
    NotRegularFile,
    OpsError,
    OutputLimit,
    PermissionDenied,
    PolicyDenied,
    Timeout,
    TooLarge,
    TooManyLinks,
    Unauthenticated,
    Unavailable,
)

from ._service import Call, log_call, undecodable

__all__ = [
    "SERVICE_NAME",
    "STATUS",
    "CallScope",
    "Undecodable",
    "abort_with",
    "current_principal",
    "status_of",
    "tolerant",
]

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["Broker"].full_name

log = logging.getLogger("opsbroker.grpc")

STATUS: dict[type[OpsError], grpc.StatusCode] = {
    NotFound: grpc.StatusCode.NOT_FOUND,
    IsADirectory: grpc.StatusCode.FAILED_PRECONDITION,
    NotADirectory: grpc.StatusCode.FAILED_PRECONDITION,
    AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    DirectoryNotEmpty: grpc.StatusCode.FAILED_PRECONDITION,
    NotRegularFile: grpc.StatusCode.FAILED_PRECONDITION,
    TooManyLinks: grpc.StatusCode.FAILED_PRECONDITION,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    PolicyDenied: grpc.StatusCode.PERMISSION_DENIED,
    EscapesRoot: grpc.StatusCode.PERMISSION_DENIED,
    TooLarge: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Timeout: grpc.StatusCode.DEADLINE_EXCEEDED,
    Aborted: grpc.StatusCode.CANCELLED,
    OutputLimit: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
}

current_principal: ContextVar[str] = ContextVar("opsbroker_principal", default="-")
"""Who is calling, set by the authentication wrapper before the method runs."""


def status_of(error: OpsError) -> grpc.StatusCode:
    for cls in type(error).__mro__:
        status = STATUS.get(cls)
        if status is not None:
            return status
    return grpc.StatusCode.UNKNOWN


async def abort_with(context: grpc.aio.ServicerContext[Any, Any], error: OpsError) -> None:
    """End the call with ``error``'s status and its ``ErrorDetail``. Always raises."""
    detail = error_to_wire(error).SerializeToString()
    await context.abort(
        status_of(error), str(error), trailing_metadata=((ERROR_METADATA_KEY, detail),)
    )


class CallScope:
    """One call's scope: maps errors to a status and logs one line when the call ends."""

    __slots__ = ("_call", "_context", "_op", "_start")

    def __init__(self, context: grpc.aio.ServicerContext[Any, Any], op: str, call: Call) -> None:
        self._context = context
        self._op = op
        self._call = call  # its ``subject`` is what the line names, read when the call ends
        self._start = 0.0

    async def __aenter__(self) -> None:
        self._start = time.perf_counter()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        outcome = "ok"
        try:
            if exc is None:
                return
            if isinstance(exc, OpsError):
                outcome = exc.code
                await abort_with(self._context, exc)
            elif isinstance(exc, asyncio.CancelledError):
                outcome = "cancelled"
            elif isinstance(exc, grpc.aio.AbortError):
                outcome = "aborted"
            elif isinstance(exc, Exception):
                outcome = "internal"
                log.error("%s %s failed", self._op, self._call.subject, exc_info=exc)
                await self._context.abort(
                    grpc.StatusCode.INTERNAL,
                    f"{self._op}: internal error in the broker ({type(exc).__name__}); "
                    "see the broker's log",
                )
        finally:
            log_call(
                log, current_principal.get(), self._op, self._call.subject, outcome, self._start
            )


class Undecodable:
    """Stands for a client message that does not parse (so the call can answer INVALID_ARGUMENT
    instead of grpc's UNKNOWN)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def error(self, op: str) -> InvalidArgument:
        return undecodable(op, self.reason)


def tolerant(deserialize: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserialize is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as exc:
            return Undecodable(type(exc).__name__)

    return parse
