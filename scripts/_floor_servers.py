#!/usr/bin/env python3
"""The transports' own floor: a bare grpc.aio and a bare asyncssh server, nothing of ours.

Run by ``scripts/bench_ssh.py`` (``exec_cpu``, ``peers``) as a child process, so that its CPU
can be read apart from the client's and it does not share the client's event loop. Prints
``grpc PORT`` and ``ssh PORT`` once both listen, then serves until stdin closes. Each answers a
call as the broker answers ``exec("true")``: gRPC, a server-streaming call that writes one small
message and ends (and, for comparison, a unary call); SSH, one small reply to each small message
on a session channel the client keeps open (as our SSH client reuses its channels). gRPC's
``Stream`` writes ``COUNT`` messages of ``SIZE`` bytes (the request is ``b"COUNT SIZE"``): the
floor of a streamed read. gRPC's ``Output`` streams what ``head -c SIZE /dev/zero`` writes to a
pipe (the request is ``b"SIZE"``), each read of the pipe as one message: the floor of command
output, with the same producer as our exec. gRPC's ``Pairs`` answers each message on one open
bidirectional stream with one small message: what an exec would cost if many shared one call.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sys
from collections.abc import AsyncIterator

import opsbroker  # noqa: F401  (first: its import quiets asyncssh's DSA warning)

# isort: split
import asyncssh
import grpc
import grpc.aio
from opsbroker import eventloop

REPLY = b"\x12\x02\x08\x00"  # the size of an ExecEvent carrying an exit code
METHOD = "/bench.Floor/Run"
PIPE_SIZE = 1024 * 1024  # the output pipe's kernel buffer, as the broker's (broker._process)
F_SETPIPE_SZ = 1031


async def _run(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> None:
    await context.write(REPLY)


async def _stream(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> None:
    count, size = map(int, request.split())
    payload = bytes(size)
    for _ in range(count):
        await context.write(payload)


async def output_stream(request: bytes, context: object) -> AsyncIterator[bytes]:
    """The bare stream of a command's output: what ``head -c SIZE /dev/zero`` writes to a pipe
    of the broker's size, each read (of up to the pipe's size) yielded as one message."""
    read_fd, write_fd = os.pipe()
    with contextlib.suppress(OSError):
        fcntl.fcntl(read_fd, F_SETPIPE_SZ, PIPE_SIZE)
    os.set_blocking(read_fd, False)
    try:
        try:
            proc = await asyncio.create_subprocess_exec(
                "head", "-c", request.decode(), "/dev/zero", stdout=write_fd
            )
        finally:
            os.close(write_fd)
        while True:
            try:
                data = os.read(read_fd, PIPE_SIZE)
            except BlockingIOError:
                await _readable(read_fd)
                continue
            if not data:
                break
            yield data
        await proc.wait()
    finally:
        os.close(read_fd)


async def _readable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


async def _pairs(
    requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[bytes, bytes]
) -> None:
    while await context.read() is not grpc.aio.EOF:
        await context.write(REPLY)


async def _echo(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return REPLY


class _Echo(asyncssh.SSHServerSession[bytes]):
    def connection_made(self, chan: asyncssh.SSHServerChannel[bytes]) -> None:
        self._chan = chan

    def subsystem_requested(self, subsystem: str) -> bool:
        return True

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        self._chan.write(REPLY)


class _Server(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return False  # no authentication: a loopback bench server

    def session_requested(self) -> _Echo:
        return _Echo()


async def main() -> None:
    handlers = {
        "Run": grpc.unary_stream_rpc_method_handler(_run),
        "Echo": grpc.unary_unary_rpc_method_handler(_echo),
        "Stream": grpc.unary_stream_rpc_method_handler(_stream),
        "Pairs": grpc.stream_stream_rpc_method_handler(_pairs),
        "Output": grpc.unary_stream_rpc_method_handler(output_stream),
    }
    generic = grpc.method_handlers_generic_handler("bench.Floor", handlers)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((generic,))
    grpc_port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    ssh = await asyncssh.create_server(
        _Server,
        "127.0.0.1",
        0,
        server_host_keys=[asyncssh.generate_private_key("ssh-ed25519")],
        encryption_algs=["aes128-gcm@openssh.com"],
        encoding=None,
    )
    ssh_port = ssh.sockets[0].getsockname()[1]
    print(f"grpc {grpc_port}\nssh {ssh_port}", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    ssh.close()
    await server.stop(None)


if __name__ == "__main__":
    eventloop.run(main())
