"""Processes that outlive a call on the broker core (``Broker.processes``): output, replay, the
ring, stdin, the PTY, timeouts, limits, owners, and no survivors by any way of ending."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker import Broker
from operations import (
    InvalidArgument,
    KillReason,
    NotFound,
    PolicyDenied,
    ProcessOutput,
    ProcessPolicy,
    ProcessState,
    PtySize,
    Stream,
)
from tests.conformance._commands import SHORT_LIMIT_S

from ._procscan import MARK_VAR, all_gone, kill_pids, new_marker, survivors

pytestmark = pytest.mark.anyio

LIMIT_S = 20.0


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = Broker(str(tmp_path), process_policy=ProcessPolicy(retention=60))
    try:
        yield b
    finally:
        await b.aclose()


async def collect(b: Broker, id: str, from_offset: int = 0) -> list[ProcessOutput]:
    async def run() -> list[ProcessOutput]:
        return [piece async for piece in b.processes.attach(id, from_offset=from_offset)]

    return await asyncio.wait_for(run(), LIMIT_S)


def joined(pieces: list[ProcessOutput]) -> bytes:
    return b"".join(piece.data for piece in pieces)


async def wait(b: Broker, id: str) -> ProcessState:
    info = await asyncio.wait_for(b.processes.wait(id), LIMIT_S)
    return info.state


async def test_start_output_and_exit_code(broker: Broker) -> None:
    cwd = broker.root
    info = await broker.processes.start("echo out; echo err >&2; exit 3", cwd)
    assert info.running and info.id.startswith("p-") and len(info.id) == 14
    done = await asyncio.wait_for(broker.processes.wait(info.id), LIMIT_S)
    assert (done.state, done.exit_code, done.kill_reason) == (ProcessState.EXITED, 3, None)
    pieces = await collect(broker, info.id)
    by_stream = {p.stream: p.data for p in pieces}
    assert by_stream == {Stream.STDOUT: b"out\n", Stream.STDERR: b"err\n"}
    assert done.bytes_out == 8
    assert [p.id for p in await broker.processes.list_processes()] == [info.id]


async def test_replay_from_zero_and_from_a_middle_offset(broker: Broker) -> None:
    info = await broker.processes.start(
        "for i in $(seq 1 2000); do echo line-$i; done", broker.root
    )
    await wait(broker, info.id)
    whole = joined(await collect(broker, info.id))
    expected = b"".join(b"line-%d\n" % i for i in range(1, 2001))
    assert whole == expected
    middle = 12345
    tail = await collect(broker, info.id, from_offset=middle)
    assert tail[0].offset == middle and tail[0].dropped == 0
    assert joined(tail) == expected[middle:]


async def test_ring_overflow_reports_dropped_bytes(tmp_path: Path) -> None:
    ring = 4096
    async with Broker(str(tmp_path), process_policy=ProcessPolicy(ring_bytes=ring)) as b:
        info = await b.processes.start("head -c 100000 /dev/zero | tr '\\0' x", b.root)
        done = await asyncio.wait_for(b.processes.wait(info.id), LIMIT_S)
        assert done.bytes_out == 100000
        pieces = await collect(b, info.id)
        assert pieces[0].dropped == 100000 - ring
        assert pieces[0].offset == 100000 - ring
        assert joined(pieces) == b"x" * ring
        assert sum(p.dropped for p in pieces) == 100000 - ring


async def test_cat_round_trips_ten_mib_through_stdin(broker: Broker) -> None:
    size = 10 * 1024 * 1024
    payload = os.urandom(size)
    policy_ring = 1024 * 1024
    info = await broker.processes.start("cat", broker.root)

    async def reader() -> bytes:
        got = bytearray()
        async for piece in broker.processes.attach(info.id):
            assert piece.dropped == 0  # a following attacher keeps up with cat
            got += piece.data
        return bytes(got)

    reading = asyncio.create_task(reader())
    for start in range(0, size, 256 * 1024):
        await broker.processes.write_stdin(info.id, payload[start : start + 256 * 1024])
    await broker.processes.close_stdin(info.id)
    got = await asyncio.wait_for(reading, LIMIT_S)
    assert len(got) == size and got == payload
    assert (await broker.processes.wait(info.id)).exit_code == 0
    assert policy_ring < size  # the ring alone could not have held it
    with pytest.raises(InvalidArgument):
        await broker.processes.write_stdin(info.id, b"late")


async def test_write_after_close_stdin_is_refused(broker: Broker) -> None:
    info = await broker.processes.start("sleep 30", broker.root)
    await broker.processes.close_stdin(info.id)
    await broker.processes.close_stdin(info.id)  # idempotent
    with pytest.raises(InvalidArgument, match="close_stdin"):
        await broker.processes.write_stdin(info.id, b"x")
    await broker.processes.kill(info.id)


async def test_pty_is_a_terminal_and_follows_resize(broker: Broker) -> None:
    command = "tty; stty size; read line; stty size"
    info = await broker.processes.start(command, broker.root, pty=PtySize(cols=91, rows=27))
    seen = bytearray()

    async def until(needle: bytes) -> None:
        async for piece in broker.processes.attach(info.id, from_offset=len(seen)):
            assert piece.stream is Stream.STDOUT
            seen.extend(piece.data)
            if needle in seen:
                return

    await asyncio.wait_for(until(b"27 91"), LIMIT_S)
    assert b"/dev/pts/" in seen and b"not a tty" not in seen
    await broker.processes.resize(info.id, 120, 40)
    await broker.processes.write_stdin(info.id, b"go\n")
    await asyncio.wait_for(until(b"40 120"), LIMIT_S)
    done = await asyncio.wait_for(broker.processes.wait(info.id), LIMIT_S)
    assert done.exit_code == 0 and done.pty == PtySize(120, 40)


async def test_pty_sigint_ends_the_foreground_sleep(broker: Broker) -> None:
    info = await broker.processes.start("sleep 30", broker.root, pty=PtySize(80, 24))
    await asyncio.sleep(0.2)
    await broker.processes.signal(info.id, signal.SIGINT)
    done = await asyncio.wait_for(broker.processes.wait(info.id), 5)
    assert (done.state, done.exit_code, done.signal) == (ProcessState.EXITED, None, signal.SIGINT)


async def test_resize_without_pty_and_bad_arguments(broker: Broker) -> None:
    info = await broker.processes.start("sleep 30", broker.root)
    with pytest.raises(InvalidArgument, match="no terminal"):
        await broker.processes.resize(info.id, 80, 24)
    with pytest.raises(InvalidArgument):
        await broker.processes.signal(info.id, 0)
    with pytest.raises(InvalidArgument):
        await broker.processes.signal(info.id, 12345)
    with pytest.raises(InvalidArgument):
        await broker.processes.start("true", broker.root, pty=PtySize(0, 24))
    with pytest.raises(InvalidArgument):
        await broker.processes.start("true", broker.root, timeout=0)
    with pytest.raises(InvalidArgument):
        broker.processes.attach(info.id, from_offset=-1)
    await broker.processes.kill(info.id)


async def test_idle_timeout_kills(broker: Broker) -> None:
    info = await broker.processes.start("echo a; sleep 30", broker.root, idle_timeout=0.3)
    done = await asyncio.wait_for(broker.processes.wait(info.id), 5)
    assert (done.state, done.kill_reason) == (ProcessState.KILLED, KillReason.IDLE_TIMEOUT)


async def test_output_keeps_the_idle_timeout_away(broker: Broker) -> None:
    command = "for i in 1 2 3 4 5 6; do echo $i; sleep 0.5; done"  # 3 s, in steps of 0.5
    info = await broker.processes.start(command, broker.root, idle_timeout=SHORT_LIMIT_S)
    done = await asyncio.wait_for(broker.processes.wait(info.id), 5)
    assert (done.state, done.exit_code) == (ProcessState.EXITED, 0)


async def test_policy_idle_timeout_caps_the_callers(tmp_path: Path) -> None:
    async with Broker(str(tmp_path), process_policy=ProcessPolicy(idle_timeout=0.3)) as b:
        info = await b.processes.start("sleep 30", b.root, idle_timeout=1000)
        done = await asyncio.wait_for(b.processes.wait(info.id), 5)
        assert done.kill_reason is KillReason.IDLE_TIMEOUT


async def test_lifetime_timeout_kills_and_is_capped_by_policy(tmp_path: Path) -> None:
    async with Broker(str(tmp_path), process_policy=ProcessPolicy(max_lifetime=0.4)) as b:
        info = await b.processes.start("while :; do echo .; sleep 0.05; done", b.root, timeout=100)
        done = await asyncio.wait_for(b.processes.wait(info.id), 5)
        assert (done.state, done.kill_reason) == (ProcessState.KILLED, KillReason.TIMEOUT)
        info = await b.processes.start("sleep 30", b.root, timeout=0.2)
        assert (await b.processes.wait(info.id)).kill_reason is KillReason.TIMEOUT


async def test_limits_per_owner_and_total(tmp_path: Path) -> None:
    policy = ProcessPolicy(max_per_principal=2, max_total=3)
    async with Broker(str(tmp_path), process_policy=policy) as b:
        p = b.processes
        a1 = await p.start("sleep 30", b.root, owner="alice")
        await p.start("sleep 30", b.root, owner="alice")
        with pytest.raises(PolicyDenied, match="kill one") as denied:
            await p.start("sleep 30", b.root, owner="alice")
        assert denied.value.rule == "process.max_per_principal: 2"
        await p.start("sleep 30", b.root, owner="bob")
        with pytest.raises(PolicyDenied) as denied:
            await p.start("sleep 30", b.root, owner="carol")
        assert denied.value.rule == "process.max_total: 3"
        await p.kill(a1.id, owner="alice")  # a finished one no longer counts
        await p.start("sleep 30", b.root, owner="carol")


async def test_another_owners_id_is_not_found(broker: Broker) -> None:
    p = broker.processes
    info = await p.start("sleep 30", broker.root, owner="alice")
    with pytest.raises(NotFound):
        await p.kill(info.id, owner="mallory")
    with pytest.raises(NotFound):
        p.attach(info.id, owner="mallory")
    with pytest.raises(NotFound):
        await p.write_stdin(info.id, b"x", owner="mallory")
    with pytest.raises(NotFound):
        await p.signal(info.id, signal.SIGTERM, owner="mallory")
    assert await p.list_processes(owner="mallory") == []
    assert [i.id for i in await p.list_processes(owner="alice")] == [info.id]
    assert [i.id for i in await p.list_processes()] == [info.id]  # the embedder sees all
    assert (await p.kill(info.id, owner="alice")).kill_reason is KillReason.KILLED


async def test_retention_forgets_finished_records(tmp_path: Path) -> None:
    async with Broker(str(tmp_path), process_policy=ProcessPolicy(retention=0.2)) as b:
        info = await b.processes.start("echo hi", b.root)
        await asyncio.wait_for(b.processes.wait(info.id), LIMIT_S)
        assert joined(await collect(b, info.id)) == b"hi\n"
        await asyncio.sleep(0.5)
        with pytest.raises(NotFound):
            await b.processes.wait(info.id)


async def test_survives_detach_and_attaches_again(broker: Broker) -> None:
    p = broker.processes
    info = await p.start("echo first; read x; echo second $x", broker.root)
    iterator = p.attach(info.id)
    first = await asyncio.wait_for(anext(iterator), LIMIT_S)
    assert first.data == b"first\n"
    await iterator.aclose()  # type: ignore[attr-defined]

    async def follow() -> None:
        async for _ in p.attach(info.id):
            pass

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0.1)
    follower.cancel()  # a cancelled attacher detaches too
    with contextlib.suppress(asyncio.CancelledError):
        await follower
    assert (await p.list_processes())[0].running
    many = [asyncio.create_task(collect(broker, info.id)) for _ in range(3)]
    await p.write_stdin(info.id, b"42\n")
    for task in many:
        assert joined(await task) == b"first\nsecond 42\n"


LEAKERS = {
    "setsid": "setsid sleep 60 & echo started; sleep 60",
    "double_fork": "( ( sleep 60 & ) & ); echo started; sleep 60",
    "nohup": "nohup sleep 60 >/dev/null 2>&1 & echo started; sleep 60",
    "ignores_term": "trap '' TERM; ( trap '' TERM; sleep 60 ) & echo started; sleep 60",
}


async def started(b: Broker, id: str) -> None:
    async def until() -> None:
        async for piece in b.processes.attach(id):
            if b"started" in piece.data:
                return

    await asyncio.wait_for(until(), LIMIT_S)


@pytest.mark.parametrize("name", sorted(LEAKERS))
@pytest.mark.parametrize("ending", ["kill", "timeout", "idle", "aclose"])
async def test_no_survivors(tmp_path: Path, name: str, ending: str) -> None:
    marker = new_marker()
    env = {MARK_VAR: marker}
    b = Broker(str(tmp_path))
    try:
        options: dict[str, float] = {}
        if ending == "timeout":
            options["timeout"] = SHORT_LIMIT_S
        elif ending == "idle":
            options["idle_timeout"] = SHORT_LIMIT_S
        info = await b.processes.start(LEAKERS[name], b.root, env=env, **options)  # type: ignore[arg-type]
        await started(b, info.id)
        assert survivors(marker)
        if ending == "kill":
            done = await asyncio.wait_for(b.processes.kill(info.id), LIMIT_S)
            assert done.kill_reason is KillReason.KILLED
        elif ending == "aclose":
            await asyncio.wait_for(b.aclose(), LIMIT_S)
        else:
            done = await asyncio.wait_for(b.processes.wait(info.id), LIMIT_S)
            want = KillReason.TIMEOUT if ending == "timeout" else KillReason.IDLE_TIMEOUT
            assert done.kill_reason is want
        assert all_gone(marker, within=5.0), survivors(marker)
    finally:
        await b.aclose()
        kill_pids(survivors(marker))


async def test_exec_and_start_report_a_signal_by_one_rule(broker: Broker) -> None:
    """A shell that a signal ends (not one the broker sent): ``exit_code`` ``None`` and the
    signal, in ``exec``'s result and in a started process's record alike."""
    result = await broker.exec("kill -TERM $$", broker.root, on_data=lambda _: None)
    assert (result.exit_code, result.signal, result.kill_reason) == (None, signal.SIGTERM, None)
    info = await broker.processes.start("kill -TERM $$", broker.root)
    done = await asyncio.wait_for(broker.processes.wait(info.id), LIMIT_S)
    assert (done.exit_code, done.signal, done.kill_reason) == (None, signal.SIGTERM, None)
