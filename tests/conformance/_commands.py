"""The commands the exec tests run: each behaves the same on real bash and on a scripted runner.

Conformance tests use only these strings. A disk backend runs them through its shell; the
memory backend registers the handlers below (:func:`register_standard_commands`), which
reproduce bash's output byte for byte.
"""

from __future__ import annotations

import re

from operations import CommandContext, CommandRunner

ECHO_HI = "echo hi"
EXIT_3 = "exit 3"
SLEEP = "sleep 30"
START_THEN_SLEEP = "echo start; sleep 30"
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

    runner.register(ECHO_HI, echo_hi)
    runner.register(re.compile(r"exit (\d+)"), lambda ctx: int(ctx.match[1]) if ctx.match else 0)
    runner.register(SLEEP, sleep)
    runner.register(START_THEN_SLEEP, start_then_sleep)
    runner.register(PWD, pwd)
    runner.register(PRINTF_NO_NEWLINE, printf)
    runner.register(ECHO_ENV, echo_env)
    runner.register(OUT_AND_ERR, out_and_err)
    runner.register(re.compile(r"seq 1 (\d+)"), seq)
