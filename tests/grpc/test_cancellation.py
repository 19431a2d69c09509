"""Cancellation over the wire: a cancelled call, a deadline, an abort and a killed client all leave
zero processes of the command's tree within 1 s (found by scanning ``/proc``)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import grpc
import grpc.aio
import pytest
from opsbroker.v1 import broker_pb2 as pb
from opsbroker.v1 import broker_pb2_grpc as pb_grpc

from broker import Broker
from operations import AbortController, ExecResult, InMemoryOperations, KillReason
from tests.broker._procscan import marked_env, new_marker, survivors

from ._harness import client, serving, token_of

REPO = Path(__file__).resolve().parents[2]
TREE = "for i in $(seq 20); do sleep 1000 & done; wait"  # bash + 20 children
TREE_SIZE = 21
SETTLE_S = 1.0  # the bar: every process gone this soon after the cancellation


async def _wait_for(predicate: object, within: float) -> bool:
    """Poll ``predicate`` every 10 ms for at most ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.01)
    return bool(predicate())  # type: ignore[operator]


async def _tree_started(marker: str) -> None:
    assert await _wait_for(lambda: len(survivors(marker)) >= TREE_SIZE, 20.0), "tree never started"


async def _tree_gone(marker: str) -> None:
    assert await _wait_for(lambda: not survivors(marker), SETTLE_S), survivors(marker)


async def test_cancelling_the_task_kills_the_tree(tmp_path: Path) -> None:
    marker = new_marker()
    async with serving(tmp_path, None) as server, client(server) as ops:
        task = asyncio.create_task(
            ops.exec(TREE, ops.root, on_data=lambda _: None, env=marked_env(marker))
        )
        await _tree_started(marker)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert survivors(marker) == []  # gone before the cancellation completed, as locally
        assert await ops.exists(ops.root)  # the connection still serves


async def test_aborting_the_signal_kills_the_tree_and_reports_it(tmp_path: Path) -> None:
    marker = new_marker()
    controller = AbortController()
    async with serving(tmp_path, None) as server, client(server) as ops:
        task = asyncio.create_task(
            ops.exec(
                TREE,
                ops.root,
                on_data=lambda _: None,
                env=marked_env(marker),
                signal=controller.signal,
            )
        )
        await _tree_started(marker)
        controller.abort()
        assert await task == ExecResult(None, KillReason.ABORTED)
        assert survivors(marker) == []


async def test_broker_timeout_kills_the_tree(tmp_path: Path) -> None:
    marker = new_marker()
    async with serving(tmp_path, None) as server, client(server) as ops:
        result = await ops.exec(
            TREE, ops.root, on_data=lambda _: None, env=marked_env(marker), timeout=1.0
        )
        assert result == ExecResult(None, KillReason.TIMEOUT)
        assert survivors(marker) == []


async def test_rpc_deadline_kills_the_tree(tmp_path: Path) -> None:
    marker = new_marker()
    async with serving(tmp_path, None) as server:
        metadata = (("authorization", f"Bearer {token_of(server)}"),)
        async with grpc.aio.insecure_channel(server.addresses[0]) as channel:
            stub = pb_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
            request = pb.ExecRequest(command=TREE, cwd=str(tmp_path / "ROOT"))
            request.env.update(marked_env(marker))
            call = stub.Run(request, metadata=metadata, timeout=1.5)
            await _tree_started(marker)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                while await call.read() is not grpc.aio.EOF:
                    pass
            assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        await _tree_gone(marker)


_CLIENT = textwrap.dedent(
    """
    import asyncio, sys
    from agent_side import connect

    async def main(address, token, root, marker):
        env = {"PATH": "/usr/bin:/bin", "OPSBROKER_TEST_MARK": marker}
        async with connect(f"grpc://{address}", token=token) as ops:
            print("connected", flush=True)
            await ops.exec(sys.argv[5], root, on_data=lambda _: None, env=env)

    asyncio.run(main(*sys.argv[1:5]))
    """
)


async def test_sigkill_of_the_client_kills_the_tree(tmp_path: Path) -> None:
    marker = new_marker()
    async with serving(tmp_path, None) as server:
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'proto'}"}
        args = [server.addresses[0], token_of(server), str(tmp_path / "ROOT"), marker, TREE]
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _CLIENT, *args, env=env, stdout=subprocess.PIPE
        )
        try:
            await _tree_started(marker)
            child.send_signal(signal.SIGKILL)
            await child.wait()
            await _tree_gone(marker)
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()


async def test_shutdown_kills_running_commands(tmp_path: Path) -> None:
    marker = new_marker()
    async with serving(tmp_path, None) as server, client(server) as ops:
        task = asyncio.create_task(
            ops.exec(TREE, ops.root, on_data=lambda _: None, env=marked_env(marker))
        )
        await _tree_started(marker)
        await server.stop(grace=1.0)
        assert await task == ExecResult(None, KillReason.SHUTDOWN)
        assert survivors(marker) == []


def test_tree_command_is_a_real_tree() -> None:
    """The command the tests kill really is 21 processes (else they prove nothing)."""
    assert Broker is not None
    assert TREE.count("sleep") == 1 and TREE_SIZE == 21


async def _run_events(stub: object, request: pb.ExecRequest, metadata: object) -> pb.ExecExit:
    """The exit event of a Run call (output events skipped)."""
    async for event in stub.Run(request, metadata=metadata, timeout=30):  # type: ignore[attr-defined]
        if event.WhichOneof("event") == "exit":
            return event.exit
    raise AssertionError("no exit event")


async def test_an_abort_that_overtakes_its_run_starts_it_aborted(tmp_path: Path) -> None:
    """AbortRun may reach the broker before its Run: the command then never runs."""
    async with serving(tmp_path, None) as server:
        metadata = (("authorization", f"Bearer {token_of(server)}"),)
        root = tmp_path / "ROOT"
        async with grpc.aio.insecure_channel(server.addresses[0]) as channel:
            stub = pb_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
            await stub.AbortRun(pb.AbortRunRequest(abort_id="early"), metadata=metadata)
            request = pb.ExecRequest(command="touch ran", cwd=str(root), abort_id="early")
            end = await _run_events(stub, request, metadata)
            assert end.kill_reason == pb.KILL_REASON_ABORTED and not end.HasField("exit_code")
            assert not (root / "ran").exists()
            end = await _run_events(stub, request, metadata)  # the early abort is used up
            assert end.exit_code == 0 and (root / "ran").exists()


async def test_abort_ids_belong_to_their_principal(tmp_path: Path) -> None:
    """Another principal's AbortRun with the same id stops nothing; an id still running is
    refused."""
    tokens = tmp_path / "tokens"
    tokens.write_text("tok-alice alice\ntok-bob bob\n")
    tokens.chmod(0o600)
    async with serving(tmp_path, None) as server:
        alice = (("authorization", "Bearer tok-alice"),)
        bob = (("authorization", "Bearer tok-bob"),)
        root = str(tmp_path / "ROOT")
        async with grpc.aio.insecure_channel(server.addresses[0]) as channel:
            stub = pb_grpc.BrokerStub(channel)  # type: ignore[no-untyped-call]
            request = pb.ExecRequest(command="sleep 1", cwd=root, abort_id="shared")
            running = asyncio.create_task(_run_events(stub, request, alice))
            await asyncio.sleep(0.3)
            await stub.AbortRun(pb.AbortRunRequest(abort_id="shared"), metadata=bob)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await _run_events(stub, request, alice)
            assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            end = await running
            assert end.exit_code == 0 and end.kill_reason == pb.KILL_REASON_UNSPECIFIED


class _DeafExec(InMemoryOperations):
    """An exec that ignores its abort and its cancellation until ``release`` is set: a broker
    that never reports the kill."""

    def __init__(self) -> None:
        super().__init__(root="/w")
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def exec(self, command: str, cwd: str, **_: object) -> ExecResult:
        self.started.set()
        for _attempt in range(1000):  # each cancellation is swallowed, up to a bound
            try:
                await asyncio.shield(self.release.wait())
                break
            except asyncio.CancelledError:
                continue
        return ExecResult(0, None)


GRACE_S = 0.3  # the client's exec_grace in the tests of a broker that never confirms


@pytest.mark.parametrize("how", ["abort", "cancel"])
async def test_a_kill_the_broker_never_confirms_ends_after_the_grace(
    tmp_path: Path, how: str
) -> None:
    """An abort gives the broker ``exec_grace`` to confirm, then the exec ends ABORTED (and a
    cancelled task raises), with the RPC cut: never the whole ``exec`` hangs on the broker."""
    backend = _DeafExec()
    controller = AbortController()
    async with serving(tmp_path, backend) as server:
        try:
            async with client(server, exec_grace=GRACE_S) as ops:
                task = asyncio.create_task(
                    ops.exec("x", ops.root, on_data=lambda _: None, signal=controller.signal)
                )
                await asyncio.wait_for(backend.started.wait(), 10)
                start = time.monotonic()
                if how == "abort":
                    controller.abort()
                    assert await asyncio.wait_for(task, 10) == ExecResult(None, KillReason.ABORTED)
                else:
                    task.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await asyncio.wait_for(task, 10)
                waited = time.monotonic() - start
                # the grace, not the 1 s backstop of a cancelled caller's wait
                assert GRACE_S * 0.9 <= waited < GRACE_S + 0.9, waited
                assert await ops.exists(ops.root)  # the connection still serves
        finally:
            backend.release.set()
