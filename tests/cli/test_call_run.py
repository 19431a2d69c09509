"""``opsbroker call`` and ``opsbroker run``, run as a user runs them (a subprocess).

Success against the memory, local and gRPC backends; every bad input (unknown tool, invalid
JSON, unreachable broker, wrong token, unknown scheme, missing file) ends with one line on
stderr and a non-zero status, never a traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from ._run import (
    REPO,
    Served,
    assert_one_line_failure,
    cli_env,
    closed_port,
    opsbroker,
    serving,
)

EXIT_TOOL_ERROR, EXIT_USAGE, EXIT_BACKEND = 1, 2, 3

BATCH = {
    "role": "assistant",
    "stopReason": "toolUse",
    "content": [
        {"type": "text", "text": "Let me look at the code."},
        {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "src/app.py"}},
        {"type": "toolCall", "id": "c2", "name": "grep", "arguments": {"pattern": "def "}},
        {"type": "toolCall", "id": "c3", "name": "find", "arguments": {"pattern": "*.py"}},
        {
            "type": "toolCall",
            "id": "c4",
            "name": "bash",
            "arguments": {"command": "echo one; sleep 1.5; echo two", "timeout": 20},
        },
    ],
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    base = tmp_path_factory.mktemp("cli")
    root = base / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def main():\n    return 42\n")
    (base / "outside").mkdir()
    (base / "outside" / "secret").write_text("do not read\n")
    with serving(root, base) as server:
        yield server


# -- call ----------------------------------------------------------------------------------------


def test_call_memory_write_prints_the_model_visible_text() -> None:
    proc = opsbroker("call", "memory:", "write", '{"path": "a.txt", "content": "hi\\n"}')
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Successfully wrote")
    assert proc.stdout.endswith(" to a.txt\n")
    assert proc.stderr == ""


def test_call_local_read(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
    proc = opsbroker("call", f"local:{tmp_path}", "read", '{"path": "notes.txt"}')
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "alpha\nbeta\n", "")


def test_call_grpc_with_token_file(served: Served) -> None:
    proc = opsbroker(
        "call", served.url, "read", '{"path": "src/app.py"}', "--token-file", str(served.token_file)
    )
    assert (proc.returncode, proc.stdout) == (0, "def main():\n    return 42\n"), proc.stderr


def test_call_json_prints_the_result_message(served: Served) -> None:
    proc = opsbroker(
        "call", served.url, "ls", "{}", "--cwd", "src", "--token", served.token, "--json"
    )
    assert proc.returncode == 0, proc.stderr
    message = json.loads(proc.stdout)
    assert message["role"] == "toolResult"
    assert message["toolName"] == "ls"
    assert message["isError"] is False
    assert message["content"] == [{"type": "text", "text": "app.py"}]


def test_call_arguments_from_stdin(served: Served) -> None:
    proc = opsbroker(
        "call", served.url, "bash", "-", "--token", served.token, stdin='{"command": "echo hi"}'
    )
    assert (proc.returncode, proc.stdout) == (0, "hi\n"), proc.stderr


def test_call_error_result_exits_1_with_the_text_on_stdout(served: Served) -> None:
    proc = opsbroker(
        "call", served.url, "read", '{"path": "../outside/secret"}', "--token", served.token
    )
    assert proc.returncode == EXIT_TOOL_ERROR
    assert "escapes the workspace root" in proc.stdout
    assert "do not read" not in proc.stdout
    assert proc.stderr == ""


def test_call_validation_failure_is_an_error_result() -> None:
    proc = opsbroker("call", "memory:", "read", '{"limit": 5}')
    assert proc.returncode == EXIT_TOOL_ERROR
    assert proc.stdout.startswith('Validation failed for tool "read"')


def test_call_unknown_tool() -> None:
    line = assert_one_line_failure(opsbroker("call", "memory:", "cat", "{}"), EXIT_USAGE)
    assert "unknown tool 'cat'" in line and "read" in line


@pytest.mark.parametrize("text", ['{"path": ', "{'path': 'a'}", "not json"])
def test_call_invalid_json(text: str) -> None:
    line = assert_one_line_failure(opsbroker("call", "memory:", "read", text), EXIT_USAGE)
    assert "invalid JSON in the tool arguments" in line


def test_call_arguments_must_be_an_object() -> None:
    line = assert_one_line_failure(opsbroker("call", "memory:", "read", "[1, 2]"), EXIT_USAGE)
    assert "must be a JSON object" in line


def test_call_unknown_scheme() -> None:
    line = assert_one_line_failure(opsbroker("call", "ftp://x", "read", "{}"), EXIT_USAGE)
    assert "unknown backend scheme 'ftp'" in line


def test_call_unreachable_broker() -> None:
    url = f"grpc://127.0.0.1:{closed_port()}"
    proc = opsbroker("call", url, "ls", "{}", "--token", "t", "--connect-timeout", "2")
    line = assert_one_line_failure(proc, EXIT_BACKEND)
    assert url in line


def test_call_wrong_token(served: Served) -> None:
    proc = opsbroker("call", served.url, "ls", "{}", "--token", "not-the-token")
    line = assert_one_line_failure(proc, EXIT_BACKEND)
    assert "token" in line


def test_call_missing_token_file(served: Served, tmp_path: Path) -> None:
    proc = opsbroker("call", served.url, "ls", "{}", "--token-file", str(tmp_path / "nope"))
    assert "cannot read the token file" in assert_one_line_failure(proc, EXIT_USAGE)


def test_call_token_on_a_non_grpc_url() -> None:
    proc = opsbroker("call", "memory:", "ls", "{}", "--token", "t")
    assert "apply to grpc URLs" in assert_one_line_failure(proc, EXIT_USAGE)


def test_call_over_ssh(served: Served) -> None:
    proc = opsbroker("call", served.ssh_url, "grep", '{"pattern": "return"}', *served.ssh_options)
    assert (proc.returncode, proc.stdout) == (0, "src/app.py:2:     return 42\n"), proc.stderr


def test_call_ssh_key_not_authorized(served: Served, tmp_path: Path) -> None:
    stranger = asyncssh.generate_private_key("ssh-ed25519")
    stranger.write_private_key(str(tmp_path / "stranger"))
    options = list(served.ssh_options)
    options[1] = str(tmp_path / "stranger")
    proc = opsbroker("call", served.ssh_url, "ls", "{}", *options)
    assert "refused" in assert_one_line_failure(proc, EXIT_BACKEND)


def test_call_ssh_host_key_not_trusted(served: Served, tmp_path: Path) -> None:
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    host_port = served.ssh_url.rsplit("@", 1)[1]
    host, port = host_port.rsplit(":", 1)
    (tmp_path / "known_hosts").write_text(f"[{host}]:{port} {other}")
    options = [
        served.ssh_options[0],
        served.ssh_options[1],
        "--known-hosts",
        str(tmp_path / "known_hosts"),
    ]
    proc = opsbroker("call", served.ssh_url, "ls", "{}", *options)
    assert "host key not trusted" in assert_one_line_failure(proc, EXIT_BACKEND)


@pytest.mark.parametrize("args", [("call",), ("call", "memory:"), ("run", "memory:")])
def test_usage_errors_are_one_line(args: tuple[str, ...]) -> None:
    line = assert_one_line_failure(opsbroker(*args), EXIT_USAGE)
    assert line.endswith(f"(see 'opsbroker {args[0]} --help')")


def test_call_missing_ssh_key() -> None:
    proc = opsbroker("call", "ssh://me@127.0.0.1:1", "ls", "{}", "--identity", "/nonexistent/key")
    assert "does not exist" in assert_one_line_failure(proc, EXIT_USAGE)


# -- run -----------------------------------------------------------------------------------------


def _write_batch(tmp_path: Path, batch: object) -> Path:
    path = tmp_path / "message.json"
    path.write_text(json.dumps(batch))
    return path


def test_run_prints_the_event_stream(served: Served, tmp_path: Path) -> None:
    proc = opsbroker("run", served.url, str(_write_batch(tmp_path, BATCH)), "--token", served.token)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for call_id, tool in (("c1", "read"), ("c2", "grep"), ("c3", "find"), ("c4", "bash")):
        assert f"start   [{call_id}] {tool} " in out
        assert f"end     [{call_id}] {tool} ok" in out
        assert f"result  [{call_id}] {tool} ok" in out
    assert "update  [c4] bash" in out  # output streamed while the command ran
    assert "running [c4] bash" in out  # a progress line while it was silent
    assert "    | src/app.py:1: def main():" in out
    assert "    | src/app.py" in out
    assert "    | two" in out
    assert proc.stderr == ""
    # the result messages come in source order
    results = [line.split()[1] for line in out.splitlines() if line.startswith("result")]
    assert results == ["[c1]", "[c2]", "[c3]", "[c4]"]


def test_run_json_lines_from_stdin(served: Served) -> None:
    proc = opsbroker(
        "run", served.url, "-", "--json", "--token", served.token, stdin=json.dumps(BATCH)
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds[:4] == ["tool_execution_start"] * 4
    assert kinds.count("tool_execution_end") == 4
    assert kinds.count("message_end") == 4
    assert "tool_execution_update" in kinds
    ends = [e for e in events if e["type"] == "message_end"]
    assert [e["message"]["toolCallId"] for e in ends] == ["c1", "c2", "c3", "c4"]
    assert all(e["message"]["isError"] is False for e in ends)


def test_run_escape_attempt_and_unknown_tool_fail_in_the_results(
    served: Served, tmp_path: Path
) -> None:
    (served.root / "link").unlink(missing_ok=True)
    (served.root / "link").symlink_to("../outside/secret")
    batch = {
        "role": "assistant",
        "content": [
            {
                "type": "toolCall",
                "id": "e1",
                "name": "read",
                "arguments": {"path": "../outside/secret"},
            },
            {"type": "toolCall", "id": "e2", "name": "read", "arguments": {"path": "link"}},
            {"type": "toolCall", "id": "e3", "name": "nosuch", "arguments": {}},
            {"type": "toolCall", "id": "e4", "name": "ls", "arguments": {}},
        ],
    }
    proc = opsbroker("run", served.url, str(_write_batch(tmp_path, batch)), "--token", served.token)
    line = assert_one_line_failure(proc, EXIT_TOOL_ERROR)
    assert line == "opsbroker run: 3 of 4 tool calls failed: e1 (read), e2 (read), e3 (nosuch)"
    assert "result  [e1] read ERROR" in proc.stdout
    assert "result  [e2] read ERROR" in proc.stdout
    assert "Tool nosuch not found" in proc.stdout
    assert "result  [e4] ls ok" in proc.stdout
    assert "do not read" not in proc.stdout


def test_run_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "message.json"
    path.write_text('{"content": [')
    line = assert_one_line_failure(opsbroker("run", "memory:", str(path)), EXIT_USAGE)
    assert "invalid JSON" in line


def test_run_missing_file(tmp_path: Path) -> None:
    proc = opsbroker("run", "memory:", str(tmp_path / "absent.json"))
    assert "does not exist" in assert_one_line_failure(proc, EXIT_USAGE)


@pytest.mark.parametrize(
    ("batch", "says"),
    [
        ({"role": "user", "content": "hi"}, "expected role 'assistant'"),
        ({"content": [{"type": "toolCall", "name": "read"}]}, "not a valid assistant message"),
        ({"content": [{"type": "text", "text": "no calls"}]}, "no toolCall blocks"),
        ("a string", "must hold an assistant message"),
    ],
)
def test_run_not_an_assistant_message(tmp_path: Path, batch: object, says: str) -> None:
    proc = opsbroker("run", "memory:", str(_write_batch(tmp_path, batch)))
    assert says in assert_one_line_failure(proc, EXIT_USAGE)


def test_run_unreachable_broker(tmp_path: Path) -> None:
    url = f"grpc://127.0.0.1:{closed_port()}"
    path = _write_batch(tmp_path, BATCH)
    proc = opsbroker("run", url, str(path), "--token", "t", "--connect-timeout", "2")
    assert url in assert_one_line_failure(proc, EXIT_BACKEND)


def test_run_over_ssh_json(served: Served, tmp_path: Path) -> None:
    path = _write_batch(tmp_path, BATCH)
    proc = opsbroker("run", served.ssh_url, str(path), "--json", *served.ssh_options)
    assert proc.returncode == 0, proc.stderr
    ends = [e for e in map(json.loads, proc.stdout.splitlines()) if e["type"] == "message_end"]
    assert [(e["message"]["toolCallId"], e["message"]["isError"]) for e in ends] == [
        ("c1", False),
        ("c2", False),
        ("c3", False),
        ("c4", False),
    ]


def test_run_wrong_token(served: Served, tmp_path: Path) -> None:
    proc = opsbroker("run", served.url, str(_write_batch(tmp_path, BATCH)), "--token", "wrong")
    assert "token" in assert_one_line_failure(proc, EXIT_BACKEND)


def test_run_unknown_scheme(tmp_path: Path) -> None:
    proc = opsbroker("run", "nope:", str(_write_batch(tmp_path, BATCH)))
    assert "unknown backend scheme" in assert_one_line_failure(proc, EXIT_USAGE)


def test_call_over_a_unix_socket_needs_no_token(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "hello.txt").write_text("hi there\n")
    sock = tmp_path / "b.sock"
    proc = subprocess.Popen(
        [sys.executable, "-m", "opsbroker", "serve", "--root", str(root), "--quiet",
         "--grpc", f"unix:{sock}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli_env(),
        cwd=REPO,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert "on grpc unix:" in proc.stdout.readline()
        result = opsbroker("call", f"grpc+unix://{sock}", "read", '{"path": "hello.txt"}')
        assert (result.returncode, result.stdout) == (0, "hi there\n"), result.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        assert proc.stdout is not None
        proc.stdout.close()


def test_call_with_a_public_key_as_identity(tmp_path: Path) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_public_key(str(tmp_path / "key.pub"))
    proc = opsbroker("call", "ssh://me@127.0.0.1:1", "ls", "{}", "-i", str(tmp_path / "key.pub"))
    line = assert_one_line_failure(proc, EXIT_USAGE)
    assert f"'{tmp_path}/key.pub' is a public key" in line
    assert f"--identity takes the private key ('{tmp_path}/key'" in line
