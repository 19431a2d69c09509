"""Running a command for ``bash`` and ``powershell``: streaming, truncation, and the outcome text.

The command runs through the backend's ``exec`` (where the files are); its output streams into an
:class:`~agent_side.tools._output.OutputAccumulator`, partial results go to ``on_update`` at most
every :data:`UPDATE_THROTTLE_S`, and the end of the command becomes the reference's texts:
``Command exited with code N``, ``Command timed out after N seconds``, ``Command aborted``.
A truncated output's full copy is saved where the model can read it
(:mod:`agent_side.tools._saved_output`), and the notice names that path.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from operations import (
    Aborted,
    AbortSignal,
    BashOperations,
    ExecResult,
    InvalidArgument,
    KillReason,
    NotADirectory,
    NotFound,
    OpsError,
    PowerShellOperations,
    Timeout,
    check_timeout,
)

from .._js import js_number_to_string
from .._messages import AgentToolResult, TextContent
from .._tool import AgentToolUpdateCallback, ToolContext
from ._errors import ToolError, describe_error, errno_name
from ._output import OutputAccumulator, OutputSnapshot
from ._saved_output import keep_full_output
from ._truncate import DEFAULT_MAX_BYTES, format_size

__all__ = ["ShellRun", "SpawnContext", "SpawnHook", "run_shell_command"]

UPDATE_THROTTLE_S = 0.1  # at most ten partial results a second, as the reference
SESSION_VARIABLES = (
    "PI_SESSION_ID",
    "PI_SESSION_FILE",
    "PI_PROVIDER",
    "PI_MODEL",
    "PI_REASONING_LEVEL",
)


@dataclass(frozen=True, slots=True)
class SpawnContext:
    """What is about to run: the command (with any prefix), its directory, its environment."""

    command: str
    cwd: str
    env: dict[str, str]


SpawnHook = Callable[[SpawnContext], SpawnContext]


@dataclass(frozen=True, slots=True)
class ShellRun:
    """How one shell tool runs commands (fixed when the tool is created)."""

    shell_name: str  # "bash" or "PowerShell", as error texts spell it
    temp_file_prefix: str
    shell: Callable[[], BashOperations | PowerShellOperations]  # asked at each run
    files: Callable[[], object]  # the backend itself, where a full output is saved
    command_prefix: str | None
    expose_session_environment: bool
    spawn_hook: SpawnHook | None
    env: Mapping[str, str] | None


def _check_timeout(timeout: float | None) -> None:
    try:
        check_timeout(timeout)
    except InvalidArgument as e:
        raise ToolError(e.reason) from None  # the reference's own sentence, as every layer says


def _spawn_context(run: ShellRun, command: str, cwd: str, ctx: ToolContext | None) -> SpawnContext:
    # Only additions travel to the backend: it builds the base environment itself (from its
    # policy, on a broker), so the agent's own variables (API keys) never reach a command.
    env = dict(run.env or {})
    for name in SESSION_VARIABLES:
        env.pop(name, None)
    if run.expose_session_environment and ctx is not None:
        values = {
            "PI_SESSION_ID": ctx.session_id,
            "PI_SESSION_FILE": ctx.session_file,
            "PI_PROVIDER": ctx.extra.get("provider"),
            "PI_MODEL": ctx.model,
            "PI_REASONING_LEVEL": ctx.thinking_level,
        }
        env.update({k: str(v) for k, v in values.items() if v})
    if run.command_prefix:
        command = f"{run.command_prefix}\n{command}"
    spawn = SpawnContext(command=command, cwd=cwd, env=env)
    return run.spawn_hook(spawn) if run.spawn_hook is not None else spawn


def _with_notice(snapshot: OutputSnapshot, acc: OutputAccumulator, empty: str) -> str:
    text = snapshot.content or empty
    t = snapshot.truncation
    if not t.truncated:
        return text
    start = t.total_lines - t.output_lines + 1
    end = t.total_lines
    path = snapshot.full_output_path
    if t.last_line_partial:
        notice = (
            f"[Showing last {format_size(t.output_bytes)} of line {end} "
            f"(line is {format_size(acc.last_line_bytes)}). Full output: {path}]"
        )
    elif t.truncated_by == "lines":
        notice = f"[Showing lines {start}-{end} of {t.total_lines}. Full output: {path}]"
    else:
        notice = (
            f"[Showing lines {start}-{end} of {t.total_lines} "
            f"({format_size(DEFAULT_MAX_BYTES)} limit). Full output: {path}]"
        )
    return f"{text}\n\n{notice}"


def _details(snapshot: OutputSnapshot) -> dict[str, Any] | None:
    if not snapshot.truncation.truncated:
        return None
    return {
        "truncation": snapshot.truncation.to_json(),
        "fullOutputPath": snapshot.full_output_path,
    }


async def run_shell_command(
    run: ShellRun,
    command: str,
    timeout: float | None,
    cwd: str,
    signal: AbortSignal | None,
    on_update: AgentToolUpdateCallback[Any] | None,
    ctx: ToolContext | None,
) -> AgentToolResult[Any]:
    """Run ``command`` and turn its end into the tool's result or error (see the module doc)."""
    _check_timeout(timeout)
    spawn = _spawn_context(run, command, cwd, ctx)
    acc = OutputAccumulator(temp_file_prefix=run.temp_file_prefix)
    loop = asyncio.get_running_loop()
    accepting = True
    dirty = False
    last_emit = -math.inf
    timer: asyncio.TimerHandle | None = None

    def emit() -> None:
        nonlocal dirty, last_emit, timer
        timer = None
        if on_update is None:
            return
        dirty = False
        last_emit = loop.time()
        snapshot = acc.snapshot(persist_if_truncated=True)
        details: dict[str, Any] = {"fullOutputPath": snapshot.full_output_path}
        if snapshot.truncation.truncated:
            details["truncation"] = snapshot.truncation.to_json()
        on_update(
            AgentToolResult[Any](
                content=[TextContent(text=snapshot.content or "")],
                details={k: v for k, v in details.items() if v is not None},
            )
        )

    def on_data(data: bytes) -> None:
        nonlocal dirty, timer
        if not accepting:
            return
        acc.append(data)
        if on_update is None:
            return
        dirty = True
        wait = UPDATE_THROTTLE_S - (loop.time() - last_emit)
        if wait <= 0:
            if timer is not None:
                timer.cancel()
            emit()
        elif timer is None:
            timer = loop.call_later(wait, emit)

    if on_update is not None:
        on_update(AgentToolResult[Any](content=[], details=None))
    result: ExecResult | None = None
    failure: BaseException | None = None
    try:
        if signal is not None and signal.aborted:
            result = ExecResult(None, KillReason.ABORTED)
        else:
            result = await run.shell().exec(
                spawn.command, spawn.cwd, on_data=on_data, signal=signal, timeout=timeout,
                env=spawn.env,
            )  # fmt: skip
    except OpsError as exc:
        failure = exc
    finally:
        accepting = False
        acc.finish()
        if timer is not None:
            timer.cancel()
            timer = None
        if dirty:
            emit()
        snapshot = acc.snapshot(persist_if_truncated=True)
        acc.close_temp_file()
    if snapshot.full_output_path is not None:
        files = run.files()
        root = getattr(files, "root", None)
        saved = await keep_full_output(
            files, root if isinstance(root, str) else None, snapshot.full_output_path
        )
        snapshot = replace(snapshot, full_output_path=saved)
    details = _details(snapshot)
    if isinstance(failure, Aborted) or (
        result is not None and result.kill_reason is KillReason.ABORTED
    ):
        raise ToolError(_joined(_with_notice(snapshot, acc, ""), "Command aborted"))
    if isinstance(failure, Timeout) or (
        result is not None and result.kill_reason is KillReason.TIMEOUT
    ):
        seconds = js_number_to_string(timeout) if timeout is not None else "?"
        status = f"Command timed out after {seconds} seconds"
        raise ToolError(_joined(_with_notice(snapshot, acc, ""), status))
    if isinstance(failure, OpsError):
        raise ToolError(_exec_error(failure, run, spawn.cwd)) from None
    assert result is not None
    text = _with_notice(snapshot, acc, "(no output)")
    if result.kill_reason is KillReason.OUTPUT_LIMIT:
        raise ToolError(f"{text}\n\nCommand killed: its output exceeded the backend's output limit")
    if result.kill_reason is KillReason.SHUTDOWN:
        raise ToolError(f"{text}\n\nCommand killed: the backend shut down")
    if result.exit_code is None or result.exit_code < 0:
        # Killed by a signal nobody here sent (a negative code is Python's way to say so). The
        # reference calls this success; it is not (docs/parity.md).
        raise ToolError(f"{text}\n\nCommand terminated without an exit code")
    if result.exit_code != 0:
        raise ToolError(f"{text}\n\nCommand exited with code {result.exit_code}")
    return AgentToolResult[Any](content=[TextContent(text=text)], details=details)


def _joined(text: str, status: str) -> str:
    return f"{text}\n\n{status}" if text else status


def _exec_error(error: OpsError, run: ShellRun, cwd: str) -> str:
    if isinstance(error, NotFound | NotADirectory) and error.path in (cwd, None):
        return f"Working directory does not exist: {cwd}\nCannot execute {run.shell_name} commands."
    if errno_name(error) is not None:
        return describe_error(error, "spawn", error.path or cwd)
    # Why the command could not start (no PowerShell installed, a policy refusal...): the
    # reference rethrows such errors unchanged, so the backend's own sentence is shown.
    return error.reason
