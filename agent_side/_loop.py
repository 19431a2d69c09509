"""The tool-execution loop: from an assistant message's tool calls to result messages.

:func:`execute_tool_calls` follows the reference (section 4) step by step. For each call:

1. emit ``tool_execution_start`` with the raw arguments;
2. prepare: find the tool by name, ``prepare_arguments``, validate, ``before_tool_call``
   (which may block, with a reason, and vote to terminate), abort checks. A failure here is an
   *immediate* outcome: an error result, no ``execute``, no ``after_tool_call``;
3. execute with the run's abort signal and an ``on_update`` callback that emits
   ``tool_execution_update`` only until ``execute`` settles (later calls are ignored); a raised
   exception becomes an error result carrying its message;
4. ``after_tool_call`` patches the result field by field (``None`` keeps a field);
5. emit ``tool_execution_end``, then the result message's ``message_start``/``message_end``.

**Scheduling.** A batch is sequential if ``tool_execution="sequential"`` or any called tool has
``execution_mode="sequential"``: each call then completes (end event and result message) before
the next starts, and an abort stops the batch after the current call. Otherwise it is parallel:
all start events and preparations happen first, in source order (an immediate outcome's end
event comes right away); the prepared calls then run concurrently and their end events come in
*completion* order; the result messages follow, in *source* order.

**Termination.** The batch votes to end the run only if it has results and every one has
``terminate=True`` (a blocked call with ``terminate`` counts; so does an ``after_tool_call``
patch). **Failed responses.** A message whose stop reason is ``"error"`` or ``"aborted"`` runs
no call and emits nothing. **Length stops.** If the assistant message stopped with ``"length"``, no call executes:
each gets an error result saying its arguments may be truncated.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from operations import AbortSignal

from ._messages import (
    AgentEvent,
    AgentToolResult,
    AssistantMessage,
    Message,
    MessageEndEvent,
    MessageStartEvent,
    ToolCall,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
    ToolExecutionUpdateEvent,
    ToolResultContent,
    ToolResultMessage,
    Usage,
    error_tool_result,
)
from ._tool import AgentTool
from ._validate import validate_tool_arguments

__all__ = [
    "ABORTED_MESSAGE",
    "AfterToolCall",
    "AfterToolCallContext",
    "AfterToolCallResult",
    "AgentContext",
    "BeforeToolCall",
    "BeforeToolCallContext",
    "BeforeToolCallResult",
    "EventSink",
    "ToolBatchResult",
    "ToolExecution",
    "execute_tool_calls",
    "length_stop_message",
    "should_terminate_tool_batch",
]

ABORTED_MESSAGE = "Operation aborted"
"""The result text when the run's signal aborted before a call could execute."""

BLOCKED_MESSAGE = "Tool execution was blocked"
"""The result text when ``before_tool_call`` blocks without a reason."""

ToolExecution: TypeAlias = Literal["parallel", "sequential"]
"""The run-wide scheduling mode (a sequential tool in a batch overrides ``"parallel"``)."""

EventSink: TypeAlias = Callable[[AgentEvent], Awaitable[None] | None]
"""Receives every event; if it returns an awaitable, the loop awaits it (backpressure)."""


def length_stop_message(tool_name: str) -> str:
    """The error text for a tool call in a response cut off by the output token limit."""
    return (
        f'Tool call "{tool_name}" was not executed: the response hit the output token limit, '
        "so its arguments may be truncated. Re-issue the tool call with complete arguments."
    )


@dataclass(kw_only=True)
class AgentContext:
    """What the loop runs against: the active tools (looked up by name) and the transcript."""

    tools: Sequence[AgentTool[Any, Any]]
    system_prompt: str = ""
    messages: list[Message] = field(default_factory=list)


@dataclass(kw_only=True)
class BeforeToolCallContext:
    """Input of ``before_tool_call``: ``args`` are validated and may be mutated in place (the
    mutated object is executed without revalidation); ``tool_call`` is the original call."""

    assistant_message: AssistantMessage
    tool_call: ToolCall
    args: Any
    context: AgentContext


@dataclass(kw_only=True)
class BeforeToolCallResult:
    """``block=True`` stops the call with ``reason`` (or a default) as its error result;
    ``terminate=True`` on a blocked call votes to end the run."""

    block: bool = False
    reason: str | None = None
    terminate: bool | None = None


@dataclass(kw_only=True)
class AfterToolCallContext:
    """Input of ``after_tool_call``: the executed call, its args and current result."""

    assistant_message: AssistantMessage
    tool_call: ToolCall
    args: Any
    result: AgentToolResult[Any]
    is_error: bool
    context: AgentContext


@dataclass(kw_only=True)
class AfterToolCallResult:
    """A field-by-field patch of the result; ``None`` keeps the field (no deep merge)."""

    content: list[ToolResultContent] | None = None
    details: Any = None
    usage: Usage | None = None
    is_error: bool | None = None
    terminate: bool | None = None


BeforeToolCall: TypeAlias = Callable[
    [BeforeToolCallContext, AbortSignal | None], Awaitable[BeforeToolCallResult | None]
]
"""Policy hook run after validation, before execution (in source order, in both modes)."""

AfterToolCall: TypeAlias = Callable[
    [AfterToolCallContext, AbortSignal | None], Awaitable[AfterToolCallResult | None]
]
"""Result hook run after ``execute`` returns or raises (never for immediate outcomes)."""


@dataclass(kw_only=True)
class ToolBatchResult:
    """The result messages in source order, and whether the batch votes to end the run."""

    messages: list[ToolResultMessage[Any]]
    terminate: bool


@dataclass
class _Prepared:
    tool_call: ToolCall
    tool: AgentTool[Any, Any]
    args: Any


@dataclass
class _Finalized:
    tool_call: ToolCall
    result: AgentToolResult[Any]
    is_error: bool


@dataclass
class _Run:
    """One batch's fixed inputs."""

    context: AgentContext
    message: AssistantMessage
    signal: AbortSignal | None
    sink: EventSink | None
    before: BeforeToolCall | None
    after: AfterToolCall | None

    @property
    def aborted(self) -> bool:
        return self.signal is not None and self.signal.aborted

    async def emit(self, event: AgentEvent) -> None:
        if self.sink is None:
            return
        outcome = self.sink(event)
        if inspect.isawaitable(outcome):
            await outcome

    async def emit_start(self, call: ToolCall) -> None:
        await self.emit(
            ToolExecutionStartEvent(tool_call_id=call.id, tool_name=call.name, args=call.arguments)
        )

    async def emit_end(self, done: _Finalized) -> None:
        await self.emit(
            ToolExecutionEndEvent(
                tool_call_id=done.tool_call.id,
                tool_name=done.tool_call.name,
                result=done.result,
                is_error=done.is_error,
            )
        )

    async def emit_result_message(self, done: _Finalized) -> ToolResultMessage[Any]:
        message = _result_message(done)
        await self.emit(MessageStartEvent(message=message))
        await self.emit(MessageEndEvent(message=message))
        return message

    def find_tool(self, name: str) -> AgentTool[Any, Any] | None:
        return next((tool for tool in self.context.tools if tool.name == name), None)

    async def prepare(self, call: ToolCall) -> _Prepared | _Finalized:
        tool = self.find_tool(call.name)
        if tool is None:
            return _Finalized(call, error_tool_result(f"Tool {call.name} not found"), True)
        try:
            prepared_call = call
            if tool.prepare_arguments is not None:
                prepared_args = tool.prepare_arguments(call.arguments)
                if prepared_args is not call.arguments:
                    prepared_call = call.model_copy(update={"arguments": prepared_args})
            args = validate_tool_arguments(tool, prepared_call)
            if self.before is not None:
                decision = await self.before(
                    BeforeToolCallContext(
                        assistant_message=self.message,
                        tool_call=call,
                        args=args,
                        context=self.context,
                    ),
                    self.signal,
                )
                if self.aborted:
                    return _Finalized(call, error_tool_result(ABORTED_MESSAGE), True)
                if decision is not None and decision.block:
                    result = error_tool_result(decision.reason or BLOCKED_MESSAGE)
                    if decision.terminate is True:
                        result.terminate = True
                    return _Finalized(call, result, True)
            if self.aborted:
                return _Finalized(call, error_tool_result(ABORTED_MESSAGE), True)
            return _Prepared(call, tool, args)
        except Exception as exc:
            return _Finalized(call, error_tool_result(_error_text(exc)), True)

    async def execute(self, prepared: _Prepared) -> tuple[AgentToolResult[Any], bool]:
        call = prepared.tool_call
        emissions: list[asyncio.Future[Any]] = []
        accepting = True

        def on_update(partial: AgentToolResult[Any]) -> None:
            if not accepting or self.sink is None:
                return
            outcome = self.sink(
                ToolExecutionUpdateEvent(
                    tool_call_id=call.id,
                    tool_name=call.name,
                    args=call.arguments,
                    partial_result=partial,
                )
            )
            if inspect.isawaitable(outcome):
                emissions.append(asyncio.ensure_future(outcome))

        try:
            result = _normalized(
                await prepared.tool.execute(call.id, prepared.args, self.signal, on_update)
            )
            accepting = False
            await asyncio.gather(*emissions)
            return result, False
        except Exception as exc:
            accepting = False
            await asyncio.gather(*emissions)
            return error_tool_result(_error_text(exc)), True
        finally:
            accepting = False

    async def finalize(
        self, prepared: _Prepared, result: AgentToolResult[Any], is_error: bool
    ) -> _Finalized:
        if self.after is None:
            return _Finalized(prepared.tool_call, result, is_error)
        try:
            patch = await self.after(
                AfterToolCallContext(
                    assistant_message=self.message,
                    tool_call=prepared.tool_call,
                    args=prepared.args,
                    result=result,
                    is_error=is_error,
                    context=self.context,
                ),
                self.signal,
            )
        except Exception as exc:
            return _Finalized(prepared.tool_call, error_tool_result(_error_text(exc)), True)
        if patch is not None:
            update: dict[str, Any] = {
                name: value
                for name, value in (
                    ("content", patch.content),
                    ("details", patch.details),
                    ("usage", patch.usage),
                    ("terminate", patch.terminate),
                )
                if value is not None
            }
            result = result.model_copy(update=update)
            if patch.is_error is not None:
                is_error = patch.is_error
        return _Finalized(prepared.tool_call, result, is_error)

    async def run_prepared(self, prepared: _Prepared) -> _Finalized:
        result, is_error = await self.execute(prepared)
        return await self.finalize(prepared, result, is_error)


def _normalized(result: Any) -> AgentToolResult[Any]:
    """A tool's return value as a result, as the reference reads it: a missing or ``None``
    ``content`` is empty content, a missing ``details`` is ``None``. A result built without
    validation (``model_construct``) or a plain mapping is read field by field."""
    if (
        isinstance(result, AgentToolResult)
        and isinstance(getattr(result, "content", None), list)
        and hasattr(result, "details")
    ):
        return result
    fields = result if isinstance(result, dict) else getattr(result, "__dict__", None)
    values = {k: v for k, v in (fields or {}).items() if v is not None}
    values["content"] = values.get("content") or []
    values.setdefault("details", None)
    return AgentToolResult[Any].model_validate(values)


def _error_text(exc: BaseException) -> str:
    return str(exc)


def _result_message(done: _Finalized) -> ToolResultMessage[Any]:
    result = done.result
    return ToolResultMessage[Any](
        tool_call_id=done.tool_call.id,
        tool_name=done.tool_call.name,
        content=list(result.content or []),
        details=result.details,
        usage=result.usage,
        added_tool_names=list(result.added_tool_names) if result.added_tool_names else None,
        is_error=done.is_error,
    )


def should_terminate_tool_batch(results: Sequence[AgentToolResult[Any]]) -> bool:
    """True only for a non-empty batch whose every result has ``terminate=True``."""
    return bool(results) and all(result.terminate is True for result in results)


async def execute_tool_calls(
    context: AgentContext | Sequence[AgentTool[Any, Any]],
    assistant_message: AssistantMessage,
    *,
    emit: EventSink | None = None,
    signal: AbortSignal | None = None,
    tool_execution: ToolExecution = "parallel",
    before_tool_call: BeforeToolCall | None = None,
    after_tool_call: AfterToolCall | None = None,
) -> ToolBatchResult:
    """Run the tool calls of ``assistant_message`` and return their result messages.

    ``context`` is an :class:`AgentContext` or just the active tools. ``emit`` receives the
    events in the documented order. ``signal`` is handed to every tool and hook; once it aborts,
    no further call starts. Tool failures never raise: they become error results. The caller
    appends the returned messages to its transcript.
    """
    ctx = context if isinstance(context, AgentContext) else AgentContext(tools=list(context))
    run = _Run(ctx, assistant_message, signal, emit, before_tool_call, after_tool_call)
    calls = assistant_message.tool_calls
    if not calls or assistant_message.stop_reason in ("error", "aborted"):
        # A failed or aborted response runs none of its calls, as the reference's loop.
        return ToolBatchResult(messages=[], terminate=False)
    if assistant_message.stop_reason == "length":
        finished = await _fail_truncated(run, calls)
    elif tool_execution == "sequential" or any(
        (tool := run.find_tool(call.name)) is not None and tool.execution_mode == "sequential"
        for call in calls
    ):
        finished = await _run_sequential(run, calls)
    else:
        finished = await _run_parallel(run, calls)
    messages = [message for _, message in finished]
    return ToolBatchResult(
        messages=messages,
        terminate=should_terminate_tool_batch([done.result for done, _ in finished]),
    )


async def _fail_truncated(
    run: _Run, calls: list[ToolCall]
) -> list[tuple[_Finalized, ToolResultMessage[Any]]]:
    finished = []
    for call in calls:
        await run.emit_start(call)
        done = _Finalized(call, error_tool_result(length_stop_message(call.name)), True)
        await run.emit_end(done)
        finished.append((done, await run.emit_result_message(done)))
    return finished


async def _run_sequential(
    run: _Run, calls: list[ToolCall]
) -> list[tuple[_Finalized, ToolResultMessage[Any]]]:
    finished = []
    for call in calls:
        await run.emit_start(call)
        prepared = await run.prepare(call)
        done = prepared if isinstance(prepared, _Finalized) else await run.run_prepared(prepared)
        await run.emit_end(done)
        finished.append((done, await run.emit_result_message(done)))
        if run.aborted:
            break
    return finished


async def _run_parallel(
    run: _Run, calls: list[ToolCall]
) -> list[tuple[_Finalized, ToolResultMessage[Any]]]:
    slots: list[_Prepared | _Finalized] = []
    for call in calls:
        await run.emit_start(call)
        prepared = await run.prepare(call)
        if isinstance(prepared, _Finalized):
            await run.emit_end(prepared)
        slots.append(prepared)
        if run.aborted:
            break

    async def deferred(prepared: _Prepared) -> _Finalized:
        if run.aborted:
            done = _Finalized(prepared.tool_call, error_tool_result(ABORTED_MESSAGE), True)
        else:
            done = await run.run_prepared(prepared)
        await run.emit_end(done)
        return done

    tasks: dict[int, asyncio.Task[_Finalized]] = {}
    try:
        async with asyncio.TaskGroup() as group:
            for index, slot in enumerate(slots):
                if isinstance(slot, _Prepared):
                    tasks[index] = group.create_task(deferred(slot))
    except BaseExceptionGroup as failure:
        # Tools never raise here (their errors are results); an event sink did. Re-raise it
        # as itself rather than as a group.
        if len(failure.exceptions) == 1:
            raise failure.exceptions[0] from None
        raise
    finished = []
    for index, slot in enumerate(slots):
        done = tasks[index].result() if index in tasks else slot
        assert isinstance(done, _Finalized)
        finished.append((done, await run.emit_result_message(done)))
    return finished
