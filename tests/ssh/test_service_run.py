"""The transport-neutral service's ``Run`` and ``AbortRun`` (the one-request exec): an abort by
id stops the command, one that overtakes its Run starts it aborted."""

from __future__ import annotations

import asyncio
from pathlib import Path

from google.protobuf.message import Message
from opsbroker.v1 import broker_pb2 as pb

from broker import Broker
from broker._frontends._service import Service
from operations import Backend


class _Call:
    """Collects what the service sends; a Run or AbortRun receives nothing more."""

    def __init__(self, ops: Backend) -> None:
        self.ops = ops
        self.principal = "tester"
        self.sent: list[Message] = []

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    async def receive(self) -> Message | None:
        return None

    async def discard_input(self) -> None:
        return None


def _exit(call: _Call) -> pb.ExecExit:
    last = call.sent[-1]
    assert isinstance(last, pb.ExecEvent) and last.WhichOneof("event") == "exit"
    return last.exit


async def test_run_and_abort_run(tmp_path: Path) -> None:
    async with Broker(str(tmp_path)) as core:
        service = Service(version="test", root=core.root, info={})
        request = pb.ExecRequest(command="echo hi", cwd=str(tmp_path), abort_id="a")
        call = _Call(core)
        await service.Run(request, call)
        assert _exit(call).exit_code == 0
        assert b"".join(e.output for e in call.sent[:-1]) == b"hi\n"  # type: ignore[attr-defined]

        slow = pb.ExecRequest(command="sleep 30", cwd=str(tmp_path), abort_id="b")
        call = _Call(core)
        running = asyncio.create_task(service.Run(slow, call))
        await asyncio.sleep(0.3)
        abort = pb.AbortRunRequest(abort_id="b")
        await service.AbortRun(abort, _Call(core))
        async with asyncio.timeout(5):
            await running
        assert _exit(call).kill_reason == pb.KILL_REASON_ABORTED

        early = pb.ExecRequest(command="touch ran", cwd=str(tmp_path), abort_id="c")
        await service.AbortRun(pb.AbortRunRequest(abort_id="c"), _Call(core))
        call = _Call(core)
        await service.Run(early, call)
        assert _exit(call).kill_reason == pb.KILL_REASON_ABORTED
        assert not (tmp_path / "ran").exists()
