"""Escapes through the sandboxd surface, hostile HTTP, and process trees that must not survive.

Every escape targets a decoy the test made beside the workspace root and checks it is untouched.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from .conftest import Sandboxd
from .sdk import commands, connector


def _raw(
    broker: Sandboxd, method: str, target: str, body: bytes | None = None
) -> tuple[int, bytes]:
    host, port = broker.http.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.putrequest(method, target, skip_accept_encoding=True)
        conn.putheader("X-Opsbroker-Token", broker.token)
        conn.putheader("Content-Length", str(len(body or b"")))
        conn.endheaders(body)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    target: str
    status: int


CASES = [
    Case("dotdot-encoded-slash", "GET", "/v1/files/..%2F..%2Fdecoy.txt", 403),
    Case("dotdot-lowercase-escapes", "GET", "/v1/files/%2e%2e%2f%2e%2e%2fdecoy.txt", 403),
    Case("dotdot-plain", "GET", "/v1/files/../decoy.txt", 403),
    Case("dotdot-put", "PUT", "/v1/files/..%2Fdecoy.txt", 403),
    Case("dotdot-delete", "DELETE", "/v1/files/..%2Fdecoy.txt", 403),
    Case("through-missing-dir", "PUT", "/v1/files/a%2F..%2F..%2Fdecoy.txt", 404),
    Case("bad-percent", "GET", "/v1/files/%zz", 400),
    Case("truncated-percent", "GET", "/v1/files/abc%2", 400),
    Case("nul", "PUT", "/v1/files/a%00b", 400),
    Case("not-utf8", "GET", "/v1/files/%ff%fe", 400),
    Case("absolute-stays-inside", "GET", "/v1/files/%2Fetc%2Fpasswd", 404),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_escape_table(sandboxd: Sandboxd, case: Case) -> None:
    decoy = sandboxd.root.parent / "decoy.txt"
    decoy.write_text("decoy")
    status, body = _raw(sandboxd, case.method, case.target, b"pwned")
    assert status == case.status, body
    assert decoy.read_text() == "decoy"
    assert _raw(sandboxd, "GET", "/v1/health")[0] == 200  # still serving


def test_symlink_planted_by_a_command_is_not_written_through(sandboxd: Sandboxd) -> None:
    outside = sandboxd.root.parent / "outside"
    outside.mkdir()
    decoy = sandboxd.root.parent / "decoy.txt"
    decoy.write_text("decoy")
    run = commands(connector(sandboxd))
    result = run.run(f"ln -s {outside} dirlink && ln -s {decoy} filelink && ln -s ../decoy.txt rel")
    assert result.exit_code == 0, result.stderr
    for target in ("dirlink%2Fnew.txt", "filelink", "rel"):
        status, _ = _raw(sandboxd, "PUT", f"/v1/files/{target}", b"pwned")
        assert status == 403, target
        status, _ = _raw(sandboxd, "GET", f"/v1/files/{target}")
        assert status == 403, target
    assert decoy.read_text() == "decoy" and list(outside.iterdir()) == []


def test_symlink_swap_during_get_and_put(sandboxd: Sandboxd) -> None:
    outside = sandboxd.root.parent / "outside"
    outside.mkdir()
    (outside / "f").write_text("secret")
    before = hashlib.sha256((outside / "f").read_bytes()).hexdigest()
    inside = sandboxd.root / "real"
    inside.mkdir()
    (inside / "f").write_text("inside")
    link = sandboxd.root / "d"
    stop = threading.Event()

    def swap() -> None:
        tmp = sandboxd.root / "d.tmp"
        for i in range(200_000):
            if stop.is_set():
                return
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(outside if i % 2 else inside)
            tmp.replace(link)

    swapper = threading.Thread(target=swap)
    swapper.start()
    leaked = 0
    try:
        for i in range(1000):
            status, body = _raw(sandboxd, "GET", "/v1/files/d%2Ff")
            leaked += body == b"secret"
            assert status in (200, 403), (status, body)
            if i % 2:
                status, _ = _raw(sandboxd, "PUT", "/v1/files/d%2Ff", b"pwned")
                assert status in (204, 403)
    finally:
        stop.set()
        swapper.join(timeout=30)
    assert leaked == 0
    assert hashlib.sha256((outside / "f").read_bytes()).hexdigest() == before
    assert sorted(p.name for p in outside.iterdir()) == ["f"]


def _stub(broker: Sandboxd):  # type: ignore[no-untyped-def]
    from k8s_agent_sandbox.commands._process_stubs import process_pb2, process_pb2_grpc

    conn = connector(broker)
    conn.connect()
    return process_pb2, process_pb2_grpc.ProcessServiceStub(conn.grpc_channel())


@pytest.mark.parametrize("cwd", ["..", "../..", "/../..", "a/../../..", "out", "a/up/.."])
def test_cwd_escaping_the_root_is_permission_denied(sandboxd: Sandboxd, cwd: str) -> None:
    (sandboxd.root / "a").mkdir()
    (sandboxd.root / "out").symlink_to(sandboxd.root.parent)
    (sandboxd.root / "a" / "up").symlink_to("../..")
    pb, stub = _stub(sandboxd)
    config = pb.ProcessConfig(command=["touch", "escaped"], cwd=cwd)
    with pytest.raises(grpc.RpcError) as info:
        stub.Execute(pb.ExecuteRequest(config=config), timeout=30)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as info:
        list(stub.Start(pb.StartRequest(config=config), timeout=30))
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert not (sandboxd.root.parent / "escaped").exists()


def test_unknown_process_and_resize_without_pty(sandboxd: Sandboxd) -> None:
    pb, stub = _stub(sandboxd)
    with pytest.raises(grpc.RpcError) as info:
        stub.SendSignal(pb.SendSignalRequest(process_id=999999, signal=pb.SIGNAL_SIGTERM))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    stream = stub.Start(pb.StartRequest(config=pb.ProcessConfig(command=["cat"])), timeout=30)
    init = next(stream)
    with pytest.raises(grpc.RpcError) as info:
        stub.ResizeTTY(pb.ResizeTTYRequest(process_id=init.init.process_id, cols=10, rows=5))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    stub.WriteStdin(pb.WriteStdinRequest(process_id=init.init.process_id, input=b"hi\n"))
    stub.WriteStdin(
        pb.WriteStdinRequest(
            process_id=init.init.process_id, eof=pb.google_dot_protobuf_dot_empty__pb2.Empty()
        )
    )  # type: ignore[attr-defined]
    rest = list(stream)
    assert b"".join(e.stdout for e in rest) == b"hi\n" and rest[-1].exit.exit_code == 0


def _survivors(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in environ:
            found.append(int(entry))
    return found


TREE = (
    "setsid sh -c 'sleep 1000 & sleep 1000' & (sh -c 'sleep 1000 &' &) ; echo started; sleep 1000"
)


@pytest.mark.parametrize("how", ["sigkill", "disconnect"])
def test_started_tree_leaves_no_survivors(sandboxd: Sandboxd, how: str) -> None:
    pb, stub = _stub(sandboxd)
    marker = f"OPSBROKER_TEST_MARK={uuid.uuid4().hex}"
    name, value = marker.split("=")
    config = pb.ProcessConfig(command=["bash", "-c", TREE], env_vars={name: value})
    stream = stub.Start(pb.StartRequest(config=config), timeout=60)
    init = next(stream)
    assert next(stream).stdout == b"started\n"
    deadline = time.monotonic() + 10
    while len(_survivors(marker)) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_survivors(marker)) >= 4
    if how == "sigkill":
        stub.SendSignal(
            pb.SendSignalRequest(process_id=init.init.process_id, signal=pb.SIGNAL_SIGKILL)
        )
        events = list(stream)
        assert events[-1].WhichOneof("event") == "exit"
    else:
        stream.cancel()
    deadline = time.monotonic() + 15
    while _survivors(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _survivors(marker) == []


def test_hostile_http_gets_a_status_and_the_server_keeps_serving(sandboxd: Sandboxd) -> None:
    host, port = sandboxd.http.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n"
        )
        assert sock.recv(64).startswith(b"HTTP/1.1 4")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"GARBAGE\x00\r\n\r\n")
        assert sock.recv(64).startswith(b"HTTP/1.1 400")
    with socket.create_connection((host, int(port)), timeout=30) as sock:  # slowloris
        started = time.monotonic()
        sock.sendall(b"GET /v1/health HTTP/1.1\r\n")
        answer = b""
        for _ in range(100):
            try:
                sock.sendall(b"X: y\r\n")
            except OSError:
                break
            chunk = b""
            sock.settimeout(0.5)
            with contextlib.suppress(TimeoutError):
                chunk = sock.recv(256)
            if chunk:
                answer = chunk
                break
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert time.monotonic() - started < 30
    assert _raw(sandboxd, "GET", "/v1/health")[0] == 200
