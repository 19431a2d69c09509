"""The memory backend's processes that outlive a call, in virtual time (``time_scale``)."""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import AsyncIterator

import pytest

from operations import (
    CommandContext,
    InMemoryOperations,
    InvalidArgument,
    KillReason,
    NotADirectory,
    NotFound,
    PolicyDenied,
    ProcessInfo,
    ProcessOperations,
    ProcessOutput,
    ProcessPolicy,
    ProcessState,
    PtySize,
    Unavailable,
)

ROOT = "/workspace"
SCALE = 0.001  # one virtual second is a millisecond


_open: list[InMemoryOperations] = []


@pytest.fixture(autouse=True)
async def _close_backends() -> AsyncIterator[None]:
    """Every backend a test made is closed after it, so no scripted server outlives its test."""
    yield
    while _open:
        await _open.pop().aclose()


def backend(**policy: object) -> InMemoryOperations:
    ops = InMemoryOperations(
        {"src/": None},
        time_scale=SCALE,
        process_policy=ProcessPolicy(**policy),  # type: ignore[arg-type]
    )

    async def ticker(ctx: CommandContext) -> int:
        """``tick N``: prints ``tick i`` once a second, N times, then exits 0."""
        assert ctx.match is not None
        for i in range(int(ctx.match[1])):
            await ctx.emit(f"tick {i}\n")
            await ctx.sleep(1)
        return 0

    async def server(ctx: CommandContext) -> int:
        """A server: one line, then quiet for an hour."""
        await ctx.emit("listening on 127.0.0.1:8000\n")
        await ctx.sleep(3600)
        return 0

    ops.commands.register(re.compile(r"tick (\d+)"), ticker)
    ops.commands.register("serve", server)
    _open.append(ops)
    return ops


async def ready(ops: InMemoryOperations, id: str) -> bytes:
    """The process's first output: it is up (a harness waits for its banner)."""
    async with asyncio.timeout(10):
        outputs = ops.processes.attach(id)
        try:
            return (await anext(outputs)).data
        finally:
            await outputs.aclose()  # type: ignore[attr-defined]


async def collect(ops: InMemoryOperations, id: str, from_offset: int = 0) -> list[ProcessOutput]:
    async with asyncio.timeout(10):
        return [piece async for piece in ops.processes.attach(id, from_offset=from_offset)]


def joined(pieces: list[ProcessOutput]) -> bytes:
    return b"".join(piece.data for piece in pieces)


async def test_start_output_exit() -> None:
    ops = backend()
    assert isinstance(ops.processes, ProcessOperations)
    info = await ops.processes.start("tick 3", ROOT)
    assert re.fullmatch(r"p-[0-9a-f]{12}", info.id)
    assert info.state is ProcessState.RUNNING and info.command == "tick 3" and info.cwd == ROOT
    pieces = await collect(ops, info.id)
    assert joined(pieces) == b"tick 0\ntick 1\ntick 2\n"
    offsets = [p.offset for p in pieces]
    assert offsets == sorted(offsets) and offsets[0] == 0
    done = await ops.processes.wait(info.id)
    assert (done.state, done.exit_code, done.kill_reason) == (ProcessState.EXITED, 0, None)
    assert done.bytes_out == 21 and done.id == info.id
    assert ops.commands.history == ["tick 3"]
    assert ("process_exit", "exit:0") in [(r.op, r.outcome) for r in ops.log]


async def test_unknown_command_is_bash_not_found() -> None:
    ops = backend()
    info = await ops.processes.start("nosuchserver --port 1", ROOT)
    done = await ops.processes.wait(info.id)
    assert done.exit_code == 127
    assert joined(await collect(ops, info.id)) == b"bash: nosuchserver: command not found\n"


async def test_attach_replays_from_zero_and_from_a_middle_offset() -> None:
    ops = backend()
    info = await ops.processes.start("tick 4", ROOT)
    done = await ops.processes.wait(info.id)
    whole = joined(await collect(ops, info.id))
    assert whole == b"tick 0\ntick 1\ntick 2\ntick 3\n"
    middle = await collect(ops, info.id, from_offset=10)
    assert middle[0].offset == 10 and middle[0].dropped == 0
    assert joined(middle) == whole[10:]
    assert await collect(ops, info.id, from_offset=done.bytes_out) == []
    with pytest.raises(InvalidArgument, match="from_offset"):
        await collect(ops, info.id, from_offset=done.bytes_out + 1)


async def test_several_attachers_follow_live_and_detaching_leaves_it_running() -> None:
    ops = backend()
    info = await ops.processes.start("tick 5", ROOT)
    first, second = await asyncio.gather(collect(ops, info.id), collect(ops, info.id))
    assert joined(first) == joined(second) == b"".join(b"tick %d\n" % i for i in range(5))

    server = await ops.processes.start("serve", ROOT)
    outputs = ops.processes.attach(server.id)
    piece = await anext(outputs)
    assert piece.data == b"listening on 127.0.0.1:8000\n"
    await outputs.aclose()  # type: ignore[attr-defined]
    [listed] = [p for p in await ops.processes.list_processes() if p.id == server.id]
    assert listed.running


async def test_ring_overflow_reports_dropped_bytes() -> None:
    ops = backend(ring_bytes=16)
    info = await ops.processes.start("tick 5", ROOT)  # 35 bytes of output
    await ops.processes.wait(info.id)
    pieces = await collect(ops, info.id)
    assert pieces[0].offset == 35 - 16 and pieces[0].dropped == 35 - 16
    assert joined(pieces) == b"".join(b"tick %d\n" % i for i in range(5))[-16:]
    later = await collect(ops, info.id, from_offset=30)
    assert later[0].dropped == 0 and joined(later) == b"ck 4\n"


async def test_cat_round_trips_ten_mib_through_stdin() -> None:
    ops = backend()
    payload = bytes(range(256)) * (10 * 1024 * 1024 // 256)
    info = await ops.processes.start("cat", ROOT)

    async def feed() -> None:
        for start in range(0, len(payload), 300_000):
            await ops.processes.write_stdin(info.id, payload[start : start + 300_000])
        await ops.processes.close_stdin(info.id)
        await ops.processes.close_stdin(info.id)  # idempotent

    pieces, _ = await asyncio.gather(collect(ops, info.id), feed())
    assert sum(p.dropped for p in pieces) == 0
    assert joined(pieces) == payload
    done = await ops.processes.wait(info.id)
    assert (done.exit_code, done.bytes_out) == (0, len(payload))
    with pytest.raises(InvalidArgument, match="ended"):
        await ops.processes.write_stdin(info.id, b"more")


async def test_write_stdin_after_close_is_refused() -> None:
    ops = backend()
    info = await ops.processes.start("cat", ROOT)
    await ops.processes.write_stdin(info.id, b"hello\n")
    await ops.processes.close_stdin(info.id)
    with pytest.raises(InvalidArgument, match="closed"):
        await ops.processes.write_stdin(info.id, b"late\n")
    assert (await ops.processes.wait(info.id)).exit_code == 0
    assert joined(await collect(ops, info.id)) == b"hello\n"


async def test_cat_in_exec_reads_an_empty_stdin() -> None:
    ops = backend()
    chunks: list[bytes] = []
    result = await ops.exec("cat", ROOT, on_data=chunks.append)
    assert (result.exit_code, chunks) == (0, [])


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
async def test_a_signal_ends_a_process_as_the_core_reports(signum: int) -> None:
    ops = backend()
    info = await ops.processes.start("serve", ROOT)
    await ops.processes.signal(info.id, signum)  # even before the handler has begun
    done = await ops.processes.wait(info.id)
    assert (done.state, done.exit_code, done.signal, done.kill_reason) == (
        ProcessState.EXITED,
        None,
        signum,
        None,
    )
    up = await ops.processes.start("serve", ROOT)
    await ready(ops, up.id)
    await ops.processes.signal(up.id, signum)
    end = await ops.processes.wait(up.id)
    assert (end.exit_code, end.signal) == (None, signum)


async def test_a_trapped_signal_is_the_handlers_and_bad_numbers_are_refused() -> None:
    ops = backend()

    async def graceful(ctx: CommandContext) -> int:
        """Stops cleanly on SIGTERM."""
        ctx.trap(signal.SIGTERM)
        await ctx.emit("ready\n")
        got = await ctx.next_signal()
        await ctx.emit(f"stopping on {got}\n")
        return 0

    ops.commands.register("graceful", graceful)
    info = await ops.processes.start("graceful", ROOT)
    assert await ready(ops, info.id) == b"ready\n"
    await ops.processes.signal(info.id, signal.SIGWINCH)  # ignored by default
    await ops.processes.signal(info.id, signal.SIGTERM)
    assert (await ops.processes.wait(info.id)).exit_code == 0
    assert (
        joined(await collect(ops, info.id))
        == f"ready\nstopping on {int(signal.SIGTERM)}\n".encode()
    )
    for bad in (0, -1, 100_000, True):
        with pytest.raises(InvalidArgument, match="signal"):
            await ops.processes.signal(info.id, bad)


async def test_resize_needs_a_pty_and_records_the_size() -> None:
    ops = backend()
    sizes: list[PtySize | None] = []

    async def repl(ctx: CommandContext) -> int:
        """Reports its terminal size on every SIGWINCH."""
        ctx.trap(signal.SIGWINCH)
        sizes.append(ctx.terminal)
        await ctx.emit("> ")
        await ctx.next_signal()
        sizes.append(ctx.terminal)
        return 0

    ops.commands.register("repl", repl)
    info = await ops.processes.start("repl", ROOT, pty=PtySize(80, 24))
    assert info.pty == PtySize(80, 24)
    assert await ready(ops, info.id) == b"> "
    await ops.processes.resize(info.id, 120, 40)
    done = await ops.processes.wait(info.id)
    assert done.pty == PtySize(120, 40) and done.exit_code == 0
    assert sizes == [PtySize(80, 24), PtySize(120, 40)]
    with pytest.raises(InvalidArgument, match="positive"):
        await ops.processes.resize(info.id, 0, 40)

    plain = await ops.processes.start("serve", ROOT)
    with pytest.raises(InvalidArgument, match="no terminal"):
        await ops.processes.resize(plain.id, 100, 30)
    with pytest.raises(InvalidArgument, match="positive"):
        await ops.processes.start("serve", ROOT, pty=PtySize(0, 24))


async def test_idle_timeout_kills_a_quiet_process() -> None:
    ops = backend()
    # Output every virtual second resets the busy one's idle clock: left alone it would be killed
    # after 100 of its 200 seconds. The margin (99 virtual s, 99 ms) outlasts a loaded loop's stall.
    busy = await ops.processes.start("tick 200", ROOT, idle_timeout=100)
    quiet = await ops.processes.start("serve", ROOT, idle_timeout=2)
    done = await ops.processes.wait(quiet.id)
    assert (done.state, done.kill_reason, done.exit_code) == (
        ProcessState.KILLED,
        KillReason.IDLE_TIMEOUT,
        None,
    )
    assert (await ops.processes.wait(busy.id)).exit_code == 0


async def test_policy_idle_timeout_caps_the_callers() -> None:
    ops = backend(idle_timeout=1)
    info = await ops.processes.start("serve", ROOT, idle_timeout=1000)
    async with asyncio.timeout(5):  # 1000 virtual seconds would be a full second
        done = await ops.processes.wait(info.id)
    assert done.kill_reason is KillReason.IDLE_TIMEOUT


async def test_lifetime_timeout_and_its_cap() -> None:
    ops = backend(max_lifetime=5)
    short = await ops.processes.start("serve", ROOT, timeout=2)
    capped = await ops.processes.start("serve", ROOT, timeout=100_000)
    default = await ops.processes.start("serve", ROOT)
    async with asyncio.timeout(5):
        for id in (short.id, capped.id, default.id):
            done = await ops.processes.wait(id)
            assert (done.state, done.kill_reason) == (ProcessState.KILLED, KillReason.TIMEOUT)
    for bad in (0, -1, float("nan")):
        with pytest.raises(InvalidArgument, match="Invalid timeout"):
            await ops.processes.start("serve", ROOT, timeout=bad)
        with pytest.raises(InvalidArgument, match="Invalid timeout"):
            await ops.processes.start("serve", ROOT, idle_timeout=bad)


async def test_kill_ends_the_process_and_an_ended_one_is_returned_as_it_is() -> None:
    ops = backend()
    info = await ops.processes.start("serve", ROOT)
    assert await ready(ops, info.id) == b"listening on 127.0.0.1:8000\n"
    killed = await ops.processes.kill(info.id)
    assert (killed.state, killed.kill_reason, killed.exit_code) == (
        ProcessState.KILLED,
        KillReason.KILLED,
        None,
    )
    assert await ops.processes.kill(info.id) == killed
    assert joined(await collect(ops, info.id)) == b"listening on 127.0.0.1:8000\n"


async def test_limits_per_principal_and_in_total() -> None:
    ops = backend(max_per_principal=2, max_total=3)
    alice = [await ops.processes.start("serve", ROOT, owner="alice") for _ in range(2)]
    with pytest.raises(PolicyDenied, match=r"kill one \(kill_process\)") as denied:
        await ops.processes.start("serve", ROOT, owner="alice")
    assert denied.value.rule == "process.max_per_principal: 2"
    assert denied.value.op == "start_process" and denied.value.path == ROOT
    await ops.processes.start("serve", ROOT, owner="bob")
    with pytest.raises(PolicyDenied) as denied:
        await ops.processes.start("serve", ROOT, owner="carol")
    assert denied.value.rule == "process.max_total: 3"
    await ops.processes.kill(alice[0].id, owner="alice")  # an ended one no longer counts
    await ops.processes.start("serve", ROOT, owner="carol")


async def test_the_cwd_is_checked_as_exec_checks_it() -> None:
    ops = backend()
    ops.seed({"file": b"x"})
    with pytest.raises(NotFound):
        await ops.processes.start("serve", f"{ROOT}/missing")
    with pytest.raises(NotADirectory):
        await ops.processes.start("serve", f"{ROOT}/file")
    assert await ops.processes.list_processes() == []


async def test_another_owners_process_is_not_found() -> None:
    ops = backend()
    info = await ops.processes.start("serve", ROOT, owner="alice")
    bob_calls = [
        ops.processes.wait(info.id, owner="bob"),
        ops.processes.kill(info.id, owner="bob"),
        ops.processes.write_stdin(info.id, b"x", owner="bob"),
        ops.processes.close_stdin(info.id, owner="bob"),
        ops.processes.signal(info.id, signal.SIGTERM, owner="bob"),
        ops.processes.resize(info.id, 80, 24, owner="bob"),
        anext(ops.processes.attach(info.id, owner="bob")),
    ]
    for call in bob_calls:
        with pytest.raises(NotFound) as missing:
            await call
        assert missing.value.path == info.id
    assert await ops.processes.list_processes(owner="bob") == []
    assert [p.id for p in await ops.processes.list_processes(owner="alice")] == [info.id]
    assert [p.id for p in await ops.processes.list_processes()] == [info.id]  # the embedder
    assert (await ops.processes.kill(info.id, owner="alice")).kill_reason is KillReason.KILLED


async def test_list_is_oldest_first() -> None:
    ops = backend()
    started = [await ops.processes.start(command, ROOT) for command in ("serve", "tick 1", "cat")]
    listed: list[ProcessInfo] = await ops.processes.list_processes()
    assert [p.id for p in listed] == [p.id for p in started]
    assert len({p.id for p in listed}) == 3


async def test_aclose_kills_every_process_with_shutdown() -> None:
    ops = backend()
    first = await ops.processes.start("serve", ROOT)
    second = await ops.processes.start("cat", ROOT)
    waiting = asyncio.create_task(ops.processes.wait(first.id))
    await ops.aclose()
    assert (await waiting).kill_reason is KillReason.SHUTDOWN
    for info in await ops.processes.list_processes():
        assert (info.state, info.kill_reason) == (ProcessState.KILLED, KillReason.SHUTDOWN)
    assert {p.id for p in await ops.processes.list_processes()} == {first.id, second.id}
    with pytest.raises(Unavailable):
        await ops.processes.start("serve", ROOT)


async def test_a_finished_record_is_kept_for_its_retention() -> None:
    ops = backend(retention=5)
    info = await ops.processes.start("tick 1", ROOT)
    await ops.processes.wait(info.id)
    assert [p.id for p in await ops.processes.list_processes()] == [info.id]
    await asyncio.sleep(10 * SCALE)
    assert await ops.processes.list_processes() == []
    with pytest.raises(NotFound):
        await ops.processes.wait(info.id)
    with pytest.raises(NotFound):
        await collect(ops, info.id)
