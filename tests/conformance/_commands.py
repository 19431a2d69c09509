"""The commands the exec tests run: each behaves the same on real bash and on a scripted runner.

Conformance tests use only these strings. A disk backend runs them through its shell; the
memory backend registers the handlers below (:func:`register_standard_commands`), which
reproduce bash's output byte for byte.
"""

from __future__ import annotations

import re
import signal

from operations import CommandContext, CommandRunner

ECHO_HI = "echo hi"
EXIT_3 = "exit 3"
SLEEP = "sleep 30"
START_THEN_SLEEP = "echo start; sleep 30"
SHORT_LIMIT_S = 2.0
"""A timeout or idle timeout for a command that must say something before it fires: short for a
test, long enough that bash can start, write and be seen first on a loaded machine (0.5 s was not)."""
PWD = "pwd"
PRINTF_NO_NEWLINE = "printf 'a\\nb'"
ECHO_ENV = "echo $OPSBROKER_TEST_VAR"
OUT_AND_ERR = "echo out; echo err >&2"
MISSING = "opsbroker-no-such-command --flag"
SEQ_LINES = 2000
SEQ = f"seq 1 {SEQ_LINES}"
ENV_VAR = "OPSBROKER_TEST_VAR"

NEVER_ENDS = 30.0
"""Seconds the sleeping commands last: far beyond any timeout a test uses."""

ON_A_TERMINAL = "tty; stty size; read line; stty size"
"""On a PTY: the terminal's name, its size, then (after a line of input) its size again."""

ESCAPES = {
    "setsid": "setsid sleep 30 & echo started; sleep 30",
    "double_fork": "( ( sleep 30 & ) & ); echo started; sleep 30",
    "nohup": "nohup sleep 30 >/dev/null 2>&1 & echo started; sleep 30",
    "ignores_term": "trap '' TERM; ( trap '' TERM; sleep 30 ) & echo started; sleep 30",
}
"""The escape catalogue for started processes: each leaves a child that tries to outlive its
tree (its own session, an orphan of a double fork, ``nohup``, one that ignores SIGTERM), says
``started`` and sleeps."""


def register_standard_commands(runner: CommandRunner) -> None:
    async def echo_hi(ctx: CommandContext) -> int:
        await ctx.emit(b"hi\n")
        return 0

    async def sleep(ctx: CommandContext) -> int:
        await ctx.sleep(NEVER_ENDS)
        return 0

    async def start_then_sleep(ctx: CommandContext) -> int:
        await ctx.emit(b"start\n")
        await ctx.sleep(NEVER_ENDS)
        return 0

    async def pwd(ctx: CommandContext) -> int:
        await ctx.emit(ctx.cwd.encode() + b"\n")
        return 0

    async def printf(ctx: CommandContext) -> int:
        await ctx.emit(b"a\nb")
        return 0

    async def echo_env(ctx: CommandContext) -> int:
        await ctx.emit(ctx.env.get(ENV_VAR, "").encode() + b"\n")
        return 0

    async def out_and_err(ctx: CommandContext) -> int:
        await ctx.emit(b"out\n")
        await ctx.emit(b"err\n")
        return 0

    async def seq(ctx: CommandContext) -> int:
        assert ctx.match is not None
        last = int(ctx.match[1])
        for start in range(1, last + 1, 100):
            chunk = "".join(f"{n}\n" for n in range(start, min(start + 100, last + 1)))
            await ctx.emit(chunk)
        return 0

    async def on_a_terminal(ctx: CommandContext) -> int:
        size = ctx.terminal
        if size is None:
            await ctx.emit(b"not a tty\n")
            return 1
        await ctx.emit(b"/dev/pts/0\n")
        await ctx.emit(f"{size.rows} {size.cols}\n")
        line = b""
        while b"\n" not in line:
            piece = await ctx.read()
            if not piece:
                break
            line += piece
        size = ctx.terminal
        assert size is not None
        await ctx.emit(f"{size.rows} {size.cols}\n")
        return 0

    async def escape(ctx: CommandContext) -> int:
        if "trap" in ctx.command:
            ctx.trap(signal.SIGTERM)
        await ctx.emit(b"started\n")
        await ctx.sleep(NEVER_ENDS)
        return 0

    runner.register(ECHO_HI, echo_hi)
    runner.register(re.compile(r"exit (\d+)"), lambda ctx: int(ctx.match[1]) if ctx.match else 0)
    runner.register(SLEEP, sleep)
    runner.register(START_THEN_SLEEP, start_then_sleep)
    runner.register(PWD, pwd)
    runner.register(PRINTF_NO_NEWLINE, printf)
    runner.register(ECHO_ENV, echo_env)
    runner.register(OUT_AND_ERR, out_and_err)
    runner.register(re.compile(r"seq 1 (\d+)"), seq)
    runner.register(ON_A_TERMINAL, on_a_terminal)
    for command in ESCAPES.values():
        runner.register(command, escape)
