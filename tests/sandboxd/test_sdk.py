"""The ``k8s-agent-sandbox`` SDK's sandboxd code paths against a loopback broker (see sdk.py)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from k8s_agent_sandbox.exceptions import SandboxRequestError

from .conftest import REPO, Sandboxd
from .sdk import commands, connector, files


def test_commands_run(sandboxd: Sandboxd) -> None:
    run = commands(connector(sandboxd))
    result = run.run("echo out; echo err >&2; exit 3")
    assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 3)
    (sandboxd.root / "sub").mkdir()
    result = run.run("pwd; echo $GREETING", env={"GREETING": "hi"}, cwd="sub")
    assert result.stdout == f"{sandboxd.root / 'sub'}\nhi\n"


def test_commands_run_timeout_reports_timed_out(sandboxd: Sandboxd) -> None:
    result = commands(connector(sandboxd)).run("sleep 30", command_timeout=1)
    assert result.timed_out and result.exit_code == 124


def test_commands_stream_through_the_sdk_stub(sandboxd: Sandboxd) -> None:
    from k8s_agent_sandbox.commands._process_stubs import process_pb2, process_pb2_grpc

    conn = connector(sandboxd)
    conn.connect()
    stub = process_pb2_grpc.ProcessServiceStub(conn.grpc_channel())
    request = process_pb2.StartRequest(
        config=process_pb2.ProcessConfig(command=["sh", "-c", "echo a; echo b >&2; exit 5"])
    )
    events = list(stub.Start(request, timeout=30))
    assert events[0].WhichOneof("event") == "init" and events[0].init.process_id > 0
    out = b"".join(e.stdout for e in events if e.WhichOneof("event") == "stdout")
    err = b"".join(e.stderr for e in events if e.WhichOneof("event") == "stderr")
    assert (out, err) == (b"a\n", b"b\n")
    assert events[-1].WhichOneof("event") == "exit" and events[-1].exit.exit_code == 5


def test_a_stream_read_late_still_gets_every_byte(sandboxd: Sandboxd) -> None:
    """As sandboxd streams a command's output, a client that stops reading slows the command
    and loses nothing: 8 MB through a 1 MiB ring, read after a 3 s pause, arrive whole."""
    from k8s_agent_sandbox.commands._process_stubs import process_pb2, process_pb2_grpc

    conn = connector(sandboxd)
    conn.connect()
    stub = process_pb2_grpc.ProcessServiceStub(conn.grpc_channel())
    size = 8_000_000
    command = ["sh", "-c", f"head -c {size} /dev/zero | tr '\\0' x"]
    events = stub.Start(
        process_pb2.StartRequest(config=process_pb2.ProcessConfig(command=command)), timeout=60
    )
    assert next(events).WhichOneof("event") == "init"
    time.sleep(3)  # the client reads nothing: the broker's ring (1 MiB) fills long before
    rest = list(events)
    out = b"".join(e.stdout for e in rest if e.WhichOneof("event") == "stdout")
    assert (len(out), out.strip(b"x")) == (size, b"")
    assert rest[-1].WhichOneof("event") == "exit" and rest[-1].exit.exit_code == 0


def test_files_write_read_list_exists_delete(sandboxd: Sandboxd) -> None:
    fs = files(connector(sandboxd))
    fs.write("src/notes.txt", b"hello")
    assert (sandboxd.root / "src" / "notes.txt").read_bytes() == b"hello"
    assert fs.read("src/notes.txt") == b"hello"
    entries = fs.list("src")
    assert [(e.name, e.size, e.type, e.mode) for e in entries] == [("notes.txt", 5, "file", "0644")]
    assert fs.exists("src/notes.txt") and not fs.exists("src/missing")
    with pytest.raises(SandboxRequestError) as info:
        fs.delete("src")
    assert info.value.status_code == 409
    fs.delete("src", recursive=True)
    assert not (sandboxd.root / "src").exists()


def test_files_escape_is_403_and_outside_untouched(sandboxd: Sandboxd) -> None:
    outside = sandboxd.root.parent / "decoy.txt"
    outside.write_text("decoy")
    fs = files(connector(sandboxd))
    with pytest.raises(SandboxRequestError) as info:
        fs.write("../decoy.txt", b"pwned", allow_unsafe_paths=True)
    assert info.value.status_code == 403
    assert outside.read_text() == "decoy"


def test_wrong_token_is_refused(sandboxd: Sandboxd) -> None:
    conn = connector(sandboxd, token="wrong")
    with pytest.raises(SandboxRequestError) as info:
        files(conn).read("x")
    assert info.value.status_code == 401
    with pytest.raises(RuntimeError, match="UNAUTHENTICATED"):
        commands(conn).run("true")


def test_our_descriptors_and_the_sdks_load_in_one_process() -> None:
    """Both define ``process.v1``; ours live in a pool of their own (scripts/gen_proto), so an
    embedder with the SDK installed, or a test driving it, can import both; the bytes agree."""
    code = (
        "import k8s_agent_sandbox.commands._process_stubs as sdk\n"
        "from opsbroker.sandboxd import process_pb2 as ours\n"
        "sent = ours.StartRequest(config=ours.ProcessConfig(command=['echo', 'hi'], cwd='sub'))\n"
        "got = sdk.process_pb2.StartRequest.FromString(sent.SerializeToString())\n"
        "assert list(got.config.command) == ['echo', 'hi'] and got.config.cwd == 'sub'\n"
        "print(ours.DESCRIPTOR.services_by_name['ProcessService'].full_name)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PYTHONPATH": f"{REPO}:{REPO / 'proto'}",
            "PATH": "/usr/bin:/bin",
            "PYTHONDONTWRITEBYTECODE": "1",
        },
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "process.v1.ProcessService"
