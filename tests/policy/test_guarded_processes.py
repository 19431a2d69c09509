"""Policy and audit of processes that outlive a call, through GuardedBackend on the core and the
memory backend: a principal sees only its own processes, starting one is checked like exec, and
the audit records start, stdin, signal, kill and the exit."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker import Broker
from operations import (
    Backend,
    GuardedBackend,
    InMemoryOperations,
    NotFound,
    Policy,
    PolicyDenied,
    ProcessState,
)
from tests.conformance._commands import register_standard_commands
from tests.policy._fake import ListAudit

pytestmark = pytest.mark.anyio


@contextlib.asynccontextmanager
async def backend(kind: str, tmp_path: Path) -> AsyncIterator[Backend]:
    if kind == "memory":
        memory = InMemoryOperations(root=str(tmp_path))
        register_standard_commands(memory.commands)
        async with memory:
            yield memory
    else:
        async with Broker(str(tmp_path)) as core:
            yield core


@pytest.mark.parametrize("kind", ["memory", "core"])
async def test_owners_are_apart_and_every_step_is_audited(tmp_path: Path, kind: str) -> None:
    audit = ListAudit()
    async with backend(kind, tmp_path) as inner:
        alice = GuardedBackend(inner, Policy(), audit=audit, principal="alice", close_inner=False)
        bob = GuardedBackend(inner, Policy(), audit=audit, principal="bob", close_inner=False)
        info = await alice.processes.start("cat", str(tmp_path))
        assert [p.id for p in await bob.processes.list_processes()] == []
        for attempt in (
            bob.processes.kill(info.id),
            bob.processes.write_stdin(info.id, b"x"),
            bob.processes.wait(info.id),
        ):
            with pytest.raises(NotFound):
                await attempt
        await alice.processes.write_stdin(info.id, b"hello\n")
        await alice.processes.signal(info.id, signal.SIGTERM)
        async with asyncio.timeout(20):
            end = await alice.processes.wait(info.id)
            for _ in range(2000):  # the exit is audited by a watcher task, soon after
                if any(e["op"] == "process_exit" for e in audit.events):
                    break
                await asyncio.sleep(0.01)
        assert end.state is not ProcessState.RUNNING
    ops = [(e["op"], e["principal"], e["decision"]) for e in audit.events]
    assert ("start_process", "alice", "allow") in ops
    assert ("kill_process", "bob", "error") in ops
    assert ("write_stdin", "alice", "allow") in ops
    assert ("signal_process", "alice", "allow") in ops
    exits = [e for e in audit.events if e["op"] == "process_exit"]
    assert len(exits) == 1 and exits[0]["process"] == info.id
    start = next(e for e in audit.events if e["op"] == "start_process")
    assert start["command"] == "cat" and start["resolved"] == ""


@pytest.mark.parametrize("kind", ["memory", "core"])
async def test_starting_is_checked_like_exec(tmp_path: Path, kind: str) -> None:
    (tmp_path / ".ssh").mkdir()
    async with backend(kind, tmp_path) as inner:
        off = GuardedBackend(inner, Policy.from_mapping({"exec": {"enabled": False}}))
        with pytest.raises(PolicyDenied) as info:
            await off.processes.start("echo hi", str(tmp_path))
        assert info.value.rule == "exec.enabled: false"
        guard = GuardedBackend(inner, Policy(), close_inner=False)
        with pytest.raises(PolicyDenied) as info:
            await guard.processes.start("echo hi", str(tmp_path / ".ssh"))  # a denied cwd
        assert info.value.rule == "deny_read: **/.ssh"
        assert await guard.processes.list_processes() == []
