"""execute_tool_calls against the reference's loop tests (pi-tools.md 4, 7.3, 7.4)."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_side import (
    AgentToolResult,
    AgentToolUpdateCallback,
    TextContent,
    Usage,
)
from agent_side.loop import (
    AfterToolCallContext,
    AfterToolCallResult,
    AgentContext,
    BeforeToolCallContext,
    BeforeToolCallResult,
    execute_tool_calls,
    length_stop_message,
)
from operations import AbortController, AbortSignal

from ._fakes import Recorder, assistant, echo_tool, text_result, tool_with

CALL = ("tool-1", "echo", {"value": "hello"})


def texts(result: AgentToolResult[Any]) -> list[str]:
    return [block.text for block in result.content if isinstance(block, TextContent)]


async def test_tool_call_and_result_events_and_usage_patch() -> None:
    recorder = Recorder()
    seen_usage: list[Usage | None] = []
    original = Usage(input=1, output=2, total_tokens=3)

    async def execute(tid: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult[Any]:
        return text_result(f"echoed: {params.value}", usage=original)

    async def after(ctx: AfterToolCallContext, signal: AbortSignal | None) -> AfterToolCallResult:
        seen_usage.append(ctx.result.usage)
        return AfterToolCallResult(usage=Usage(input=10, output=20, total_tokens=30))

    batch = await execute_tool_calls(
        [tool_with("echo", execute)], assistant(CALL), emit=recorder, after_tool_call=after
    )
    assert recorder.trace() == [
        "tool_execution_start:tool-1",
        "tool_execution_end:tool-1",
        "message_start:tool-1",
        "message_end:tool-1",
    ]
    assert recorder.of_type("tool_execution_start")[0].args == {"value": "hello"}
    assert recorder.of_type("tool_execution_end")[0].is_error is False
    assert seen_usage == [original]
    [message] = batch.messages
    assert message.usage == Usage(input=10, output=20, total_tokens=30)
    assert texts(AgentToolResult[Any](content=message.content, details=None)) == ["echoed: hello"]
    assert message.is_error is False and batch.terminate is False
    # a tool result's message_start and message_end carry the same message
    start, end = recorder.of_type("message_start")[0], recorder.of_type("message_end")[0]
    assert start.message is end.message is message


async def test_result_message_wire_shape() -> None:
    recorder = Recorder()
    batch = await execute_tool_calls([echo_tool()], assistant(CALL), emit=recorder)
    wire = batch.messages[0].to_wire()
    assert set(wire) == {
        "role",
        "toolCallId",
        "toolName",
        "content",
        "details",
        "isError",
        "timestamp",
    }
    assert wire["role"] == "toolResult" and wire["toolCallId"] == "tool-1"
    end = recorder.of_type("tool_execution_end")[0].to_wire()
    assert end["type"] == "tool_execution_end" and end["isError"] is False
    assert "terminate" not in wire


async def test_length_stop_executes_nothing() -> None:
    tool = echo_tool()
    recorder = Recorder()
    message = assistant(CALL, ("tool-2", "echo", {"value": "x"}), stop="length")
    batch = await execute_tool_calls([tool], message, emit=recorder)
    assert tool.calls == []  # type: ignore[attr-defined]
    assert recorder.trace() == [
        "tool_execution_start:tool-1",
        "tool_execution_end:tool-1",
        "message_start:tool-1",
        "message_end:tool-1",
        "tool_execution_start:tool-2",
        "tool_execution_end:tool-2",
        "message_start:tool-2",
        "message_end:tool-2",
    ]
    end = recorder.of_type("tool_execution_end")[0]
    assert end.is_error is True
    assert texts(end.result) == [
        'Tool call "echo" was not executed: the response hit the output token limit, so its '
        "arguments may be truncated. Re-issue the tool call with complete arguments."
    ]
    assert "output token limit" in length_stop_message("echo")
    assert batch.terminate is False
    assert [m.is_error for m in batch.messages] == [True, True]


async def test_before_hook_mutated_args_execute_without_revalidation() -> None:
    received: list[Any] = []

    async def execute(tid: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult[Any]:
        received.append(params.value)
        return text_result("ok")

    async def before(ctx: BeforeToolCallContext, signal: AbortSignal | None) -> None:
        ctx.args.value = 123

    batch = await execute_tool_calls(
        [tool_with("echo", execute)], assistant(CALL), before_tool_call=before
    )
    assert received == [123]
    assert batch.messages[0].is_error is False


async def test_prepare_arguments_folds_legacy_input_before_validation() -> None:
    received: list[Any] = []

    async def execute(tid: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult[Any]:
        received.append(params.value)
        return text_result("ok")

    def prepare(args: Any) -> Any:
        if isinstance(args, dict) and "oldValue" in args:
            return {"value": args["oldValue"]}
        return args

    recorder = Recorder()
    tool = tool_with("echo", execute, prepare_arguments=prepare)
    batch = await execute_tool_calls(
        [tool], assistant(("tool-1", "echo", {"oldValue": "legacy"})), emit=recorder
    )
    assert received == ["legacy"]
    assert batch.messages[0].is_error is False
    # the emitted call keeps the raw arguments
    assert recorder.of_type("tool_execution_start")[0].args == {"oldValue": "legacy"}


def ordered_pair() -> tuple[Any, Any]:
    """tool-1 finishes only after tool-2 has finished (no timing involved)."""
    second_done = asyncio.Event()

    async def first(tid: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult[Any]:
        await second_done.wait()
        return text_result("first")

    async def second(tid: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult[Any]:
        second_done.set()
        return text_result("second")

    return first, second


async def test_parallel_end_events_in_completion_order_results_in_source_order() -> None:
    first, second = ordered_pair()
    recorder = Recorder()
    batch = await execute_tool_calls(
        [tool_with("first", first), tool_with("second", second)],
        assistant(("tool-1", "first", {"value": "a"}), ("tool-2", "second", {"value": "b"})),
        emit=recorder,
    )
    assert recorder.trace() == [
        "tool_execution_start:tool-1",
        "tool_execution_start:tool-2",
        "tool_execution_end:tool-2",
        "tool_execution_end:tool-1",
        "message_start:tool-1",
        "message_end:tool-1",
        "message_start:tool-2",
        "message_end:tool-2",
    ]
    assert [m.tool_call_id for m in batch.messages] == ["tool-1", "tool-2"]


async def test_parallel_starts_all_preflights_before_any_execution() -> None:
    log: list[str] = []

    def logging(name: str) -> Any:
        async def execute(
            tid: str, params: Any, signal: Any, on_update: Any
        ) -> AgentToolResult[Any]:
            log.append(f"execute:{tid}")
            return text_result(name)

        return execute

    async def before(ctx: BeforeToolCallContext, signal: AbortSignal | None) -> None:
        log.append(f"before:{ctx.tool_call.id}")

    def record(event: Any) -> None:
        log.append(f"{event.type}:{getattr(event, 'tool_call_id', '')}")

    await execute_tool_calls(
        [tool_with("a", logging("a")), tool_with("b", logging("b"))],
        assistant(("1", "a", {"value": "x"}), ("2", "nope", {}), ("3", "b", {"value": "y"})),
        emit=record,
        before_tool_call=before,
    )
    assert log[:7] == [
        "tool_execution_start:1",
        "before:1",
        "tool_execution_start:2",
        "tool_execution_end:2",  # immediate outcome: its end comes during preflight
        "tool_execution_start:3",
        "before:3",
        "execute:1",
    ]


async def test_all_parallel_tools_run_concurrently() -> None:
    both_running = asyncio.Event()
    running = 0

    async def execute(tid: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult[Any]:
        nonlocal running
        running += 1
        if running == 2:
            both_running.set()
        await asyncio.wait_for(both_running.wait(), 5)
        return text_result(tid)

    batch = await execute_tool_calls(
        [
            tool_with("a", execute, execution_mode="parallel"),
            tool_with("b", execute, execution_mode="parallel"),
        ],
        assistant(("1", "a", {"value": "x"}), ("2", "b", {"value": "y"})),
    )
    assert [m.is_error for m in batch.messages] == [False, False]


def overlap_probe() -> tuple[Any, list[str]]:
    log: list[str] = []

    async def execute(tid: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult[Any]:
        log.append(f"begin:{tid}")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        log.append(f"end:{tid}")
        return text_result(tid)

    return execute, log


async def test_sequential_mode_event_order() -> None:
    execute, log = overlap_probe()
    recorder = Recorder()
    await execute_tool_calls(
        [tool_with("a", execute), tool_with("b", execute)],
        assistant(("1", "a", {"value": "x"}), ("2", "b", {"value": "y"})),
        emit=recorder,
        tool_execution="sequential",
    )
    assert recorder.trace() == [
        "tool_execution_start:1",
        "tool_execution_end:1",
        "message_start:1",
        "message_end:1",
        "tool_execution_start:2",
        "tool_execution_end:2",
        "message_start:2",
        "message_end:2",
    ]
    assert log == ["begin:1", "end:1", "begin:2", "end:2"]


async def test_one_sequential_tool_makes_the_whole_batch_sequential() -> None:
    execute, log = overlap_probe()
    recorder = Recorder()
    await execute_tool_calls(
        [
            tool_with("a", execute),
            tool_with("b", execute, execution_mode="sequential"),
            tool_with("c", execute),
        ],
        assistant(
            ("1", "a", {"value": "x"}), ("2", "b", {"value": "y"}), ("3", "c", {"value": "z"})
        ),
        emit=recorder,
    )
    assert log == ["begin:1", "end:1", "begin:2", "end:2", "begin:3", "end:3"]
    assert recorder.trace()[:4] == [
        "tool_execution_start:1",
        "tool_execution_end:1",
        "message_start:1",
        "message_end:1",
    ]


async def test_parallel_mode_overlaps_without_a_sequential_tool() -> None:
    execute, log = overlap_probe()
    await execute_tool_calls(
        [tool_with("a", execute), tool_with("b", execute)],
        assistant(("1", "a", {"value": "x"}), ("2", "b", {"value": "y"})),
    )
    assert log[:2] == ["begin:1", "begin:2"]


# --- immediate outcomes -------------------------------------------------------------------


async def immediate(
    message_args: tuple[str, str, dict[str, Any]], **hooks: Any
) -> tuple[Any, list[Any]]:
    after_calls: list[Any] = []

    async def after(ctx: AfterToolCallContext, signal: AbortSignal | None) -> None:
        after_calls.append(ctx.tool_call.id)

    tool = echo_tool()
    recorder = Recorder()
    batch = await execute_tool_calls(
        [tool], assistant(message_args), emit=recorder, after_tool_call=after, **hooks
    )
    assert tool.calls == []  # type: ignore[attr-defined]
    assert after_calls == []  # after_tool_call is skipped for immediate outcomes
    end = recorder.of_type("tool_execution_end")[0]
    assert end.is_error is True and batch.messages[0].is_error is True
    assert end.result.details == {}
    return end.result, batch.messages


async def test_unknown_tool_is_an_immediate_error_without_quotes() -> None:
    result, _ = await immediate(("tool-1", "nope", {}))
    assert texts(result) == ["Tool nope not found"]


async def test_invalid_arguments_are_an_immediate_error_with_the_validation_text() -> None:
    result, _ = await immediate(("tool-1", "echo", {}))
    assert texts(result) == [
        'Validation failed for tool "echo":\n'
        "  - value: must have required properties value\n\n"
        "Received arguments:\n{}"
    ]


async def test_blocked_call_uses_reason_or_default() -> None:
    async def block_with_reason(ctx: BeforeToolCallContext, signal: Any) -> BeforeToolCallResult:
        return BeforeToolCallResult(block=True, reason="Blocked by policy")

    async def block_silently(ctx: BeforeToolCallContext, signal: Any) -> BeforeToolCallResult:
        return BeforeToolCallResult(block=True)

    result, _ = await immediate(CALL, before_tool_call=block_with_reason)
    assert texts(result) == ["Blocked by policy"] and result.terminate is None
    result, _ = await immediate(CALL, before_tool_call=block_silently)
    assert texts(result) == ["Tool execution was blocked"]


async def test_signal_aborted_during_before_hook_is_an_immediate_abort() -> None:
    controller = AbortController()

    async def before(ctx: BeforeToolCallContext, signal: Any) -> None:
        controller.abort()

    result, _ = await immediate(CALL, before_tool_call=before, signal=controller.signal)
    assert texts(result) == ["Operation aborted"]


async def test_signal_aborted_before_the_batch_is_an_immediate_abort() -> None:
    result, messages = await immediate(CALL, signal=AbortSignal.aborted_signal())
    assert texts(result) == ["Operation aborted"]
    assert len(messages) == 1


async def test_before_hook_exception_is_an_immediate_error() -> None:
    async def before(ctx: BeforeToolCallContext, signal: Any) -> None:
        raise RuntimeError("policy engine down")

    result, _ = await immediate(CALL, before_tool_call=before)
    assert texts(result) == ["policy engine down"]


# --- execution, updates, after_tool_call ------------------------------------------------


async def test_execute_exception_becomes_error_result_and_after_hook_still_runs() -> None:
    async def execute(tid: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult[Any]:
        raise FileNotFoundError("ENOENT: src/config.ts")

    seen: list[tuple[list[str], bool]] = []

    async def after(ctx: AfterToolCallContext, signal: Any) -> None:
        seen.append((texts(ctx.result), ctx.is_error))

    batch = await execute_tool_calls(
        [tool_with("echo", execute)], assistant(CALL), after_tool_call=after
    )
    assert seen == [(["ENOENT: src/config.ts"], True)]
    assert batch.messages[0].is_error is True
    assert batch.messages[0].details == {}


async def test_after_hook_patches_field_by_field() -> None:
    async def execute(tid: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult[Any]:
        return AgentToolResult[Any](
            content=[TextContent(text="secret")],
            details={"kept": True},
            added_tool_names=["later"],
        )

    async def after(ctx: AfterToolCallContext, signal: Any) -> AfterToolCallResult:
        return AfterToolCallResult(
            content=[TextContent(text="[REDACTED BY POLICY]")], is_error=True
        )

    recorder = Recorder()
    batch = await execute_tool_calls(
        [tool_with("echo", execute)], assistant(CALL), emit=recorder, after_tool_call=after
    )
    [message] = batch.messages
    assert [b.text for b in message.content if isinstance(b, TextContent)] == [
        "[REDACTED BY POLICY]"
    ]
    assert message.details == {"kept": True}
    assert message.added_tool_names == ["later"]
    assert message.is_error is True
    assert recorder.of_type("tool_execution_end")[0].is_error is True


async def test_after_hook_returning_none_keeps_everything() -> None:
    async def after(ctx: AfterToolCallContext, signal: Any) -> AfterToolCallResult:
        return AfterToolCallResult()

    batch = await execute_tool_calls([echo_tool()], assistant(CALL), after_tool_call=after)
    assert batch.messages[0].details == {"value": "hello"}
    assert batch.messages[0].is_error is False


async def test_after_hook_failure_becomes_error_result() -> None:
    async def after(ctx: AfterToolCallContext, signal: Any) -> AfterToolCallResult:
        raise ValueError("redactor crashed")

    recorder = Recorder()
    batch = await execute_tool_calls(
        [echo_tool()], assistant(CALL), emit=recorder, after_tool_call=after
    )
    end = recorder.of_type("tool_execution_end")[0]
    assert texts(end.result) == ["redactor crashed"] and end.is_error is True
    assert batch.messages[0].is_error is True


async def test_updates_after_settle_are_ignored() -> None:
    saved: list[AgentToolUpdateCallback[Any]] = []

    async def execute(
        tid: str, params: Any, signal: Any, on_update: AgentToolUpdateCallback[Any] | None
    ) -> AgentToolResult[Any]:
        assert on_update is not None
        on_update(text_result("progress"))
        saved.append(on_update)
        return text_result("done")

    recorder = Recorder()
    await execute_tool_calls([tool_with("echo", execute)], assistant(CALL), emit=recorder)
    count = len(recorder.events)
    saved[0](text_result("late"))
    assert len(recorder.events) == count
    assert len(recorder.of_type("tool_execution_update")) == 1
    update = recorder.of_type("tool_execution_update")[0]
    assert update.args == {"value": "hello"} and texts(update.partial_result) == ["progress"]
    assert recorder.trace().index("tool_execution_update:tool-1") < recorder.trace().index(
        "tool_execution_end:tool-1"
    )


async def test_settled_parallel_tools_late_update_is_ignored_while_another_runs() -> None:
    saved: list[AgentToolUpdateCallback[Any]] = []
    fast_done = asyncio.Event()
    late_sent = asyncio.Event()

    async def fast(tid: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult[Any]:
        saved.append(on_update)
        return text_result("fast")

    async def slow(tid: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult[Any]:
        await asyncio.wait_for(fast_done.wait(), 5)
        saved[0](text_result("late from fast"))
        late_sent.set()
        on_update(text_result("slow progress"))
        return text_result("slow")

    recorder = Recorder()

    def emit(event: Any) -> None:
        recorder(event)
        if event.type == "tool_execution_end" and event.tool_call_id == "1":
            fast_done.set()

    await execute_tool_calls(
        [tool_with("fast", fast), tool_with("slow", slow)],
        assistant(("1", "fast", {"value": "x"}), ("2", "slow", {"value": "y"})),
        emit=emit,
    )
    assert late_sent.is_set()
    updates = recorder.of_type("tool_execution_update")
    assert [(u.tool_call_id, texts(u.partial_result)) for u in updates] == [
        ("2", ["slow progress"])
    ]


async def test_async_sink_update_emissions_settle_before_the_end_event() -> None:
    log: list[str] = []

    async def execute(tid: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult[Any]:
        on_update(text_result("p1"))
        on_update(text_result("p2"))
        return text_result("done")

    async def emit(event: Any) -> None:
        if event.type == "tool_execution_update":
            await asyncio.sleep(0.01)
        log.append(
            event.type if event.type != "tool_execution_update" else texts(event.partial_result)[0]
        )

    await execute_tool_calls([tool_with("echo", execute)], assistant(CALL), emit=emit)
    assert log == [
        "tool_execution_start",
        "p1",
        "p2",
        "tool_execution_end",
        "message_start",
        "message_end",
    ]


async def test_tool_sees_the_run_signal() -> None:
    controller = AbortController()
    seen: list[AbortSignal | None] = []

    async def execute(
        tid: str, params: Any, signal: AbortSignal | None, on_update: Any
    ) -> AgentToolResult[Any]:
        seen.append(signal)
        return text_result("ok")

    await execute_tool_calls(
        [tool_with("echo", execute)], assistant(CALL), signal=controller.signal
    )
    assert seen == [controller.signal]


# --- abort during a batch -----------------------------------------------------------------


async def test_sequential_abort_during_a_call_stops_the_batch() -> None:
    controller = AbortController()

    async def aborting(tid: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult[Any]:
        controller.abort()
        raise RuntimeError("Command aborted")

    second = echo_tool("second")
    recorder = Recorder()
    batch = await execute_tool_calls(
        [tool_with("first", aborting), second],
        assistant(("1", "first", {"value": "x"}), ("2", "second", {"value": "y"})),
        emit=recorder,
        signal=controller.signal,
        tool_execution="sequential",
    )
    assert [m.tool_call_id for m in batch.messages] == ["1"]
    assert texts(AgentToolResult[Any](content=batch.messages[0].content, details=None)) == [
        "Command aborted"
    ]
    assert second.calls == []  # type: ignore[attr-defined]
    assert "tool_execution_start:2" not in recorder.trace()


async def test_parallel_abort_in_preflight_skips_later_calls_and_aborts_prepared_ones() -> None:
    controller = AbortController()
    first = echo_tool("first")

    async def before(ctx: BeforeToolCallContext, signal: Any) -> None:
        if ctx.tool_call.id == "2":
            controller.abort()

    recorder = Recorder()
    batch = await execute_tool_calls(
        [first, echo_tool("second"), echo_tool("third")],
        assistant(
            ("1", "first", {"value": "x"}),
            ("2", "second", {"value": "y"}),
            ("3", "third", {"value": "z"}),
        ),
        emit=recorder,
        signal=controller.signal,
        before_tool_call=before,
    )
    assert first.calls == []  # type: ignore[attr-defined]
    assert [m.tool_call_id for m in batch.messages] == ["1", "2"]
    assert all(
        texts(AgentToolResult[Any](content=m.content, details=None)) == ["Operation aborted"]
        for m in batch.messages
    )
    assert "tool_execution_start:3" not in recorder.trace()


# --- termination votes --------------------------------------------------------------------


def terminating(name: str, terminate: bool | None) -> Any:
    async def execute(tid: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult[Any]:
        return text_result(name, terminate=terminate)

    return tool_with(name, execute)


async def test_all_results_terminate_ends_the_run() -> None:
    batch = await execute_tool_calls(
        [terminating("a", True), terminating("b", True)],
        assistant(("1", "a", {"value": "x"}), ("2", "b", {"value": "y"})),
    )
    assert batch.terminate is True
    assert all("terminate" not in m.to_wire() for m in batch.messages)


async def test_parallel_partial_terminate_continues() -> None:
    batch = await execute_tool_calls(
        [terminating("a", True), terminating("b", None)],
        assistant(("1", "a", {"value": "x"}), ("2", "b", {"value": "y"})),
    )
    assert batch.terminate is False


async def test_blocked_with_terminate_counts_as_terminating() -> None:
    tool = echo_tool()

    async def before(ctx: BeforeToolCallContext, signal: Any) -> BeforeToolCallResult:
        return BeforeToolCallResult(block=True, reason="Blocked by policy", terminate=True)

    batch = await execute_tool_calls([tool], assistant(CALL), before_tool_call=before)
    assert batch.terminate is True
    assert tool.calls == []  # type: ignore[attr-defined]
    [message] = batch.messages
    assert message.is_error is True
    assert [b.text for b in message.content if isinstance(b, TextContent)] == ["Blocked by policy"]


async def test_mixed_batch_blocked_terminate_and_normal_continues() -> None:
    async def before(ctx: BeforeToolCallContext, signal: Any) -> BeforeToolCallResult | None:
        if ctx.tool_call.id == "1":
            return BeforeToolCallResult(block=True, reason="Blocked by policy", terminate=True)
        return None

    batch = await execute_tool_calls(
        [echo_tool()],
        assistant(("1", "echo", {"value": "x"}), ("2", "echo", {"value": "y"})),
        before_tool_call=before,
    )
    assert batch.terminate is False
    assert [m.is_error for m in batch.messages] == [True, False]


async def test_after_hook_terminate_true_stops() -> None:
    async def after(ctx: AfterToolCallContext, signal: Any) -> AfterToolCallResult:
        return AfterToolCallResult(terminate=True)

    batch = await execute_tool_calls([echo_tool()], assistant(CALL), after_tool_call=after)
    assert batch.terminate is True


async def test_terminate_must_be_exactly_true_and_empty_batch_continues() -> None:
    batch = await execute_tool_calls(
        [terminating("a", False)], assistant(("1", "a", {"value": "x"}))
    )
    assert batch.terminate is False
    empty = await execute_tool_calls([echo_tool()], assistant())
    assert empty.terminate is False and empty.messages == []


async def test_added_tool_names_copied_only_when_non_empty() -> None:
    def adding(names: list[str] | None) -> Any:
        async def execute(
            tid: str, params: Any, signal: Any, on_update: Any
        ) -> AgentToolResult[Any]:
            return text_result("ok", added_tool_names=names)

        return execute

    batch = await execute_tool_calls(
        [tool_with("a", adding(["after_load"])), tool_with("b", adding([]))],
        assistant(("1", "a", {"value": "x"}), ("2", "b", {"value": "y"})),
    )
    assert [m.added_tool_names for m in batch.messages] == [["after_load"], None]
    assert "addedToolNames" not in batch.messages[1].to_wire()


async def test_context_object_is_passed_to_hooks() -> None:
    context = AgentContext(tools=[echo_tool()], system_prompt="sys")
    seen: list[Any] = []

    async def before(ctx: BeforeToolCallContext, signal: Any) -> None:
        seen.append(ctx.context)

    await execute_tool_calls(context, assistant(CALL), before_tool_call=before)
    assert seen == [context]


async def test_content_none_is_success_with_empty_content() -> None:
    """Reference: ``content: result.content ?? []``, not an error; ``addedToolNames`` kept."""

    async def as_mapping(tid: str, params: Any, signal: Any, on_update: Any) -> Any:
        return {"content": None, "details": {"n": 1}, "addedToolNames": ["extra"]}

    async def unvalidated(tid: str, params: Any, signal: Any, on_update: Any) -> Any:
        return AgentToolResult[Any].model_construct(content=None)

    async def constructed(tid: str, params: Any, signal: Any, on_update: Any) -> Any:
        return AgentToolResult[Any](content=None, details=None, added_tool_names=["extra"])  # type: ignore[arg-type]

    for execute, details in ((as_mapping, {"n": 1}), (unvalidated, None), (constructed, None)):
        recorder = Recorder()
        batch = await execute_tool_calls(
            [tool_with("echo", execute)], assistant(CALL), emit=recorder
        )
        [message] = batch.messages
        assert message.is_error is False
        assert message.content == []
        assert message.details == details
        assert recorder.of_type("tool_execution_end")[0].is_error is False
        if execute is not unvalidated:
            assert message.added_tool_names == ["extra"]


async def test_failed_or_aborted_response_runs_no_call() -> None:
    ran: list[str] = []

    async def execute(tid: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult[Any]:
        ran.append(tid)
        return text_result("ran")

    for stop in ("error", "aborted"):
        recorder = Recorder()
        batch = await execute_tool_calls(
            [tool_with("echo", execute)], assistant(CALL, stop=stop), emit=recorder
        )
        assert batch.messages == [] and batch.terminate is False
        assert recorder.events == []
    assert ran == []
