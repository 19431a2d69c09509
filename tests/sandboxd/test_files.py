"""The REST files API beyond the SDK: PUT ``mode``, root-relative error messages, a PUT body
that stalls, and the health probes that carry no token."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import secrets
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from .conftest import REPO, Sandboxd, start_broker, stop_broker


def _request(
    broker: Sandboxd, method: str, target: str, body: bytes = b"", token: bool = True
) -> tuple[int, bytes]:
    host, port = broker.http.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        headers = {"Content-Length": str(len(body))}
        if token:
            headers["X-Opsbroker-Token"] = broker.token
        conn.request(method, target, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_put_mode_is_applied_to_new_and_replaced_files(sandboxd: Sandboxd) -> None:
    target = sandboxd.root / "bin" / "run.sh"
    assert _request(sandboxd, "PUT", "/v1/files/bin%2Frun.sh?mode=0750", b"#!/bin/sh\n")[0] == 204
    assert target.read_bytes() == b"#!/bin/sh\n"
    assert target.stat().st_mode & 0o777 == 0o750
    assert _request(sandboxd, "PUT", "/v1/files/bin/run.sh?mode=0600", b"v2")[0] == 204
    assert target.read_bytes() == b"v2" and target.stat().st_mode & 0o777 == 0o600
    assert _request(sandboxd, "PUT", "/v1/files/bin/run.sh", b"v3")[0] == 204
    assert target.stat().st_mode & 0o777 == 0o600, "without mode, a replaced file keeps its own"
    status, body = _request(sandboxd, "PUT", "/v1/files/bin/run.sh?mode=0999", b"v4")
    assert status == 400 and json.loads(body)["code"] == "INVALID_ARGUMENT"
    assert target.read_bytes() == b"v3"


@pytest.mark.parametrize(
    ("method", "target", "status", "named"),
    [
        ("GET", "/v1/files/missing%2Fb.txt", 404, "'missing/b.txt'"),
        ("GET", "/v1/files/%2Fetc%2Fpasswd", 404, "'/etc/passwd'"),
        ("DELETE", "/v1/files/gone.txt", 404, "'gone.txt'"),
        ("GET", "/v1/files/..%2Fdecoy.txt", 403, "'../decoy.txt'"),
        ("PUT", "/v1/files/d?mode=9", 400, "'d'"),
    ],
)
def test_error_messages_name_the_path_as_sent_never_the_workspace(
    sandboxd: Sandboxd, method: str, target: str, status: int, named: str
) -> None:
    got, body = _request(sandboxd, method, target, b"x" if method == "PUT" else b"")
    assert got == status, body
    message = json.loads(body)["message"]
    assert named in message, message
    assert str(sandboxd.root) not in message and str(sandboxd.root.parent) not in message


def test_execute_errors_do_not_show_the_workspace(sandboxd: Sandboxd) -> None:
    from .test_escapes import _stub

    pb, stub = _stub(sandboxd)
    with pytest.raises(grpc.RpcError) as caught:
        stub.Execute(
            pb.ExecuteRequest(config=pb.ProcessConfig(command=["true"], cwd="no/such/dir")),
            timeout=30,
        )
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert str(sandboxd.root) not in (caught.value.details() or "")
    assert "no/such/dir" in (caught.value.details() or "")


_IDLE_SERVER = textwrap.dedent(
    """
    import asyncio, sys
    from broker import Broker, TokenTable
    from broker._frontends.sandboxd import SandboxdServer

    async def main() -> None:
        server = SandboxdServer(Broker(sys.argv[1]), TokenTable({sys.argv[2]: "tester"}))
        server.app.body_idle_timeout = float(sys.argv[3])
        await server.start([], ["127.0.0.1:0"])
        print(server.http_addresses[0], flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
    """
)


@contextlib.contextmanager
def _idle_server(root: Path, token: str, idle: float) -> Iterator[tuple[str, int]]:
    """Only the REST API, in a subprocess, with a short body idle timeout."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'proto'}"}
    proc = subprocess.Popen(
        [sys.executable, "-c", _IDLE_SERVER, str(root), token, str(idle)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        host, port = proc.stdout.readline().strip().rsplit(":", 1)
        yield host, int(port)
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_stalled_put_body_is_408_and_never_replaces_the_target(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "target.txt").write_bytes(b"old")
    token = secrets.token_urlsafe(16)
    with _idle_server(root, token, 0.5) as (host, port):
        with socket.create_connection((host, port), timeout=30) as sock:
            started = time.monotonic()
            sock.sendall(
                b"PUT /v1/files/target.txt HTTP/1.1\r\nHost: x\r\nX-Opsbroker-Token: "
                + token.encode()
                + b"\r\nContent-Length: 100000\r\n\r\n"
                + b"n" * 70_000
            )
            answer = b""
            for _ in range(100):  # until the server closes
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
            elapsed = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert b'"DEADLINE_EXCEEDED"' in answer and b"'target.txt'" in answer
        assert str(root).encode() not in answer
        assert elapsed < 20
    assert (root / "target.txt").read_bytes() == b"old"
    assert sorted(p.name for p in root.iterdir()) == ["target.txt"], "the temp file is gone"


def _health(address: str, token: str | None) -> tuple[grpc.StatusCode, int]:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        metadata = [("x-opsbroker-token", token)] if token else None
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(), metadata=metadata, timeout=30)
        except grpc.RpcError as exc:
            return exc.code(), -1
        return grpc.StatusCode.OK, reply.status


def test_probes_without_a_token(tmp_path: Path) -> None:
    """As the kubelet probes with the shipped config (health_without_token = true): both
    answer without a token; every other call still needs one."""
    (tmp_path / "broker.toml").write_text("health_without_token = true\n")
    broker = start_broker(tmp_path, config=tmp_path / "broker.toml")
    try:
        assert _request(broker, "GET", "/v1/health", token=False)[0] == 200
        serving = health_pb2.HealthCheckResponse.SERVING
        assert _health(broker.grpc, None) == (grpc.StatusCode.OK, serving)
        assert _request(broker, "GET", "/v1/files/", token=False)[0] == 401
        assert _request(broker, "GET", "/v1/metadata", token=False)[0] == 401
    finally:
        stop_broker(broker)


def test_grpc_health_needs_a_token_unless_configured(sandboxd: Sandboxd) -> None:
    assert _request(sandboxd, "GET", "/v1/health", token=False)[0] == 200
    assert _health(sandboxd.grpc, None)[0] == grpc.StatusCode.UNAUTHENTICATED
    assert _health(sandboxd.grpc, sandboxd.token) == (
        grpc.StatusCode.OK,
        health_pb2.HealthCheckResponse.SERVING,
    )
