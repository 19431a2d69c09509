"""``opsbroker serve`` as a newcomer runs it: ``--root`` alone serves loopback with a generated
token and prints a command that works; an address reachable from the network without configured
authentication is refused in one line before anything listens.

Only loopback is ever bound here: the refused addresses are refused before binding, and the one
that gets past the check (``192.0.2.1``, TEST-NET-1) belongs to no interface, so binding fails.
"""

from __future__ import annotations

import errno
import os
import re
import shlex
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from broker import BrokerConfig, BrokerServer, is_loopback_address
from broker._serve import DEFAULT_GRPC_ADDRESS, parse_tcp_address
from operations import InvalidArgument

from ._run import COMMAND_TIMEOUT_S, REPO, SERVE_READY_S, cli_env

STOP_TIMEOUT_S = 15  # a clean stop drains calls for at most shutdown_grace (5 s)


def _env(state: Path) -> dict[str, str]:
    """A CLI environment whose generated token lands under ``state``, not the user's home."""
    return {**cli_env(), "XDG_STATE_HOME": str(state), "HOME": str(state)}


def _serve(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``opsbroker serve ARGS`` expected to fail before it listens."""
    return subprocess.run(
        [sys.executable, "-m", "opsbroker", "serve", *args],
        capture_output=True,
        text=True,
        env=_env(state),
        cwd=REPO,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


@contextmanager
def _serving(state: Path, *args: str) -> Iterator[str]:
    """``opsbroker serve ARGS`` in the background; yields its stdout once it printed how to
    connect; SIGTERM by PID on exit, and a clean exit is asserted."""
    out_path = state / "serve.out"
    with out_path.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "opsbroker", "serve", *args, "--quiet"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_env(state),
            cwd=REPO,
        )
        try:
            deadline = time.monotonic() + SERVE_READY_S
            printed = ""
            while time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.1)
                printed = out_path.read_text()
                if "connect with:" in printed:
                    break
            assert "connect with:" in printed, out_path.read_text()
            yield printed
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                status = proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
    assert status == 0, out_path.read_text()
    assert "opsbroker: stopped" in out_path.read_text()


def _run_printed(state: Path, printed: str) -> subprocess.CompletedProcess[str]:
    """Run the ``opsbroker call ...`` line ``serve`` printed, exactly as printed."""
    line = re.search(r"^opsbroker: connect with: (opsbroker call .*)$", printed, re.M)
    assert line, printed
    argv = shlex.split(line.group(1))
    assert argv[:2] == ["opsbroker", "call"]
    return subprocess.run(
        [sys.executable, "-m", "opsbroker", *argv[1:]],
        capture_output=True,
        text=True,
        env=_env(state),
        cwd=REPO,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "hello.txt").write_text("hi\n")
    return root


def test_root_alone_serves_loopback_with_a_generated_token(tmp_path: Path, workspace: Path) -> None:
    with _serving(tmp_path, "--root", str(workspace)) as printed:
        address = re.search(r"on grpc (\S+)", printed)
        assert address, printed
        host = address.group(1).rpartition(":")[0]
        assert host == "127.0.0.1", printed
        found = re.search(r"token file: (\S+)", printed)
        assert found, printed
        token_file = Path(found.group(1))  # $XDG_STATE_HOME/opsbroker/tokens-ws-<hash>
        assert token_file.parent == tmp_path / "opsbroker" and token_file.name.startswith(
            "tokens-ws-"
        )
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert f"grpc://{address.group(1)} --token-file {token_file} ls" in printed
        listing = _run_printed(tmp_path, printed)
        assert (listing.returncode, listing.stdout, listing.stderr) == (0, "hello.txt\n", "")


@contextmanager
def _holding(address: str) -> Iterator[None]:
    """Keep ``address`` (a loopback ``HOST:PORT``) taken, by us or by whoever already has it."""
    host, _, port = address.rpartition(":")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, int(port)))
            sock.listen(1)
        except OSError as exc:
            assert exc.errno == errno.EADDRINUSE, exc
        yield


def test_a_taken_default_port_falls_back_to_a_free_loopback_port(
    tmp_path: Path, workspace: Path
) -> None:
    with _holding(DEFAULT_GRPC_ADDRESS), _serving(tmp_path, "--root", str(workspace)) as printed:
        assert f"{DEFAULT_GRPC_ADDRESS} is in use; using a free port" in printed
        address = re.search(r"on grpc (\S+)", printed)
        assert address and address.group(1) != DEFAULT_GRPC_ADDRESS, printed
        assert address.group(1).startswith("127.0.0.1:")
        assert _run_printed(tmp_path, printed).returncode == 0


def test_an_explicit_taken_port_is_an_error_not_a_fallback(tmp_path: Path, workspace: Path) -> None:
    with _holding(DEFAULT_GRPC_ADDRESS):
        proc = _serve(tmp_path, "--root", str(workspace), "--grpc", DEFAULT_GRPC_ADDRESS)
    _assert_one_line(proc, 1)
    assert "cannot listen" in proc.stderr


def _assert_one_line(proc: subprocess.CompletedProcess[str], status: int) -> str:
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert proc.returncode == status, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("opsbroker serve: "), lines[0]
    return lines[0]


@pytest.mark.parametrize("address", ["0.0.0.0:0", "[::]:0", ":0", "example.com:7443", "10.1.2.3:0"])
def test_a_network_address_without_configured_authentication_is_refused(
    tmp_path: Path, workspace: Path, address: str
) -> None:
    proc = _serve(tmp_path, "--root", str(workspace), "--grpc", address)
    line = _assert_one_line(proc, 1)
    assert "not a loopback address" in line and "--token-file" in line
    assert proc.stdout == ""  # nothing was served
    assert not (tmp_path / "opsbroker").exists()  # and no token generated for it


def test_a_network_address_in_a_config_file_is_refused_too(tmp_path: Path, workspace: Path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text(f'root = "{workspace}"\ngrpc = ["127.0.0.1:0", "0.0.0.0:0"]\n')
    line = _assert_one_line(_serve(tmp_path, "--config", str(config)), 1)
    assert "'0.0.0.0:0'" in line and "not a loopback address" in line


def test_a_network_address_with_a_token_file_is_allowed_with_a_loud_warning(
    tmp_path: Path, workspace: Path
) -> None:
    # 192.0.2.1 (TEST-NET-1) is on no interface: the check passes, the bind then fails.
    token_file = tmp_path / "tokens"
    proc = _serve(
        tmp_path, "--root", str(workspace), "--grpc", "192.0.2.1:0", "--token-file", str(token_file)
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    warning, error = proc.stderr.splitlines()
    assert "WARNING: 192.0.2.1:0 is reachable from the network without TLS" in warning
    assert error.startswith("opsbroker serve: ") and "cannot listen" in error


@pytest.mark.parametrize(
    ("args", "status", "expected"),
    [
        ([], 2, "--root DIR is required"),
        (["--bogus"], 2, "unrecognized arguments: --bogus"),
        (["--root", "{ws}", "--grpc"], 2, "expected one argument"),
        (["--config", "{tmp}/missing.toml"], 1, "missing.toml"),
        (["--config", "{tmp}/bad.toml"], 1, "invalid TOML"),
        (["--config", "{tmp}/unknown.toml"], 1, "invalid configuration: colour"),
        (["--root", "{tmp}/nowhere", "--grpc", "127.0.0.1:0"], 1, "nowhere"),
        (["--root", "{ws}", "--grpc", "127.0.0.1:0", "--token-file", "{tmp}/open"], 1, "0644"),
        # gRPC would listen on 99999 % 65536 = 34463 and 70000 % 65536 = 4464
        (["--root", "{ws}", "--grpc", "127.0.0.1:99999"], 1, "port 99999 is out of range"),
        (["--root", "{ws}", "--grpc", ":70000"], 1, "port 70000 is out of range"),
        (["--root", "{ws}", "--grpc", "127.0.0.1:70000"], 1, "port 70000 is out of range"),
        (["--root", "{ws}", "--grpc", "localhost"], 1, "'localhost': a gRPC address is HOST:PORT"),
        (["--root", "{ws}", "--grpc", "127.0.0.1:http"], 1, "the port 'http' is not a number"),
        (["--root", "{ws}", "--ssh", "127.0.0.1:65536"], 1, "port 65536 is out of range"),
        (
            ["--root", "{ws}", "--ssh", "127.0.0.1:0", "--ssh-authorized-keys", "/nonexistent"],
            2,
            "--ssh-authorized-keys '/nonexistent' does not exist; give the file of public keys",
        ),
        (
            ["--root", "{ws}", "--ssh", "127.0.0.1:0", "--ssh-authorized-keys", "{tmp}"],
            2,
            "is not a file",
        ),
    ],
)
def test_serve_errors_are_one_line(
    tmp_path: Path, workspace: Path, args: list[str], status: int, expected: str
) -> None:
    (tmp_path / "bad.toml").write_text("root = [\n")
    (tmp_path / "unknown.toml").write_text(f'root = "{workspace}"\ncolour = "blue"\n')
    (tmp_path / "open").write_text("token principal\n")
    os.chmod(tmp_path / "open", 0o644)
    argv = [a.format(tmp=tmp_path, ws=workspace) for a in args]
    line = _assert_one_line(_serve(tmp_path, *argv), status)
    assert expected in line, line


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1:7443", True),
        ("127.8.9.10:1", True),
        ("[::1]:0", True),
        ("localhost:0", True),
        ("0.0.0.0:0", False),
        ("[::]:0", False),
        (":7443", False),
        ("192.168.1.2:7443", False),
        ("myhost:7443", False),
        ("ipv4:127.0.0.1:80", False),  # a form we do not parse counts as exposed
        ("127.0.0.1", False),
    ],
)
def test_is_loopback_address(address: str, loopback: bool) -> None:
    assert is_loopback_address(address) is loopback


async def test_in_process_broker_refuses_a_network_address_without_authentication(
    tmp_path: Path, workspace: Path
) -> None:
    config = BrokerConfig(root=workspace, grpc=["127.0.0.1:0", "0.0.0.0:0"])
    server = BrokerServer(config)
    with pytest.raises(InvalidArgument, match="not a loopback address"):
        await server.start()
    assert server.addresses == [] and server.tokens is None  # refused before anything else
    await server.stop()


def test_two_roots_get_two_token_files_and_one_root_keeps_its_own(
    tmp_path: Path, workspace: Path
) -> None:
    """All brokers of one user shared one default token file: one token opened all of them."""
    other = tmp_path / "other"
    other.mkdir()
    files = []
    for root in (workspace, other, workspace):
        with _serving(tmp_path, "--root", str(root), "--grpc", "127.0.0.1:0") as printed:
            found = re.search(r"token file: (\S+)", printed)
            assert found, printed
            files.append((found.group(1), Path(found.group(1)).read_text()))
    assert files[0][0] != files[1][0] and files[0][1] != files[1][1]
    assert files[2] == files[0]


def test_serve_prints_the_deny_lists_in_force(tmp_path: Path, workspace: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('deny_read = ["secrets/**"]\n')
    args = ("--root", str(workspace), "--grpc", "127.0.0.1:0", "--policy", str(policy))
    with _serving(tmp_path, *args) as printed:
        deny_read = re.search(r"^opsbroker: deny_read: (.*)$", printed, re.M)
        assert deny_read, printed
        assert deny_read.group(1).split(", ")[0] == "**/.env"
        assert deny_read.group(1).endswith("secrets/**")
        assert re.search(r"^opsbroker: deny_write: \*\*/\.env, ", printed, re.M)
        assert "WARNING: read_only" not in printed


def test_read_only_without_the_sandbox_warns_that_commands_can_write(
    tmp_path: Path, workspace: Path
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('read_only = true\n[sandbox]\nmode = "none"\n')
    args = ("--root", str(workspace), "--grpc", "127.0.0.1:0", "--policy", str(policy))
    with _serving(tmp_path, *args) as printed:
        assert "WARNING: read_only refuses file operations, but commands can still write" in printed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[exec]\nmax_timeout = -1\n", "exec.max_timeout: Input should be greater than 0"),
        ("deny_read = [", "is not valid TOML"),
        (None, "cannot read policy file"),
    ],
)
def test_a_policy_error_is_one_line_with_its_own_status(
    tmp_path: Path, workspace: Path, text: str | None, expected: str
) -> None:
    """A policy error used to end as ``unexpected PolicyError`` with status 1."""
    policy = tmp_path / "policy.toml"
    if text is not None:
        policy.write_text(text)
    proc = _serve(
        tmp_path, "--root", str(workspace), "--grpc", "127.0.0.1:0", "--policy", str(policy)
    )
    line = _assert_one_line(proc, 4)
    assert expected in line and "unexpected" not in line, line


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("localhost:65535", ("localhost", 65535)),
        ("[::1]:7443", ("::1", 7443)),
        (":7443", ("", 7443)),  # every interface
    ],
)
def test_parse_tcp_address(address: str, expected: tuple[str, int]) -> None:
    assert parse_tcp_address(address) == expected


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1:65536", "out of range"),
        ("localhost", "is HOST:PORT"),
        ("127.0.0.1:", "not a number"),
        ("127.0.0.1:-1", "not a number"),
        ("127.0.0.1:\u0661", "not a number"),  # a digit, but not an ASCII one
        ("::1:7443", "in brackets"),
    ],
)
def test_parse_tcp_address_refuses(address: str, reason: str) -> None:
    with pytest.raises(InvalidArgument, match=reason):
        parse_tcp_address(address)


def test_toml_grpc_and_ssh_take_one_address_or_a_list(tmp_path: Path, workspace: Path) -> None:
    one = tmp_path / "one.toml"
    one.write_text(f'root = "{workspace}"\ngrpc = "127.0.0.1:7443"\nssh = "127.0.0.1:2222"\n')
    config = BrokerConfig.from_toml(one)
    assert config.grpc == ["127.0.0.1:7443"] and config.ssh == ["127.0.0.1:2222"]
    many = tmp_path / "many.toml"
    many.write_text(f'root = "{workspace}"\ngrpc = ["127.0.0.1:1", "unix:/tmp/x.sock"]\n')
    assert BrokerConfig.from_toml(many).grpc == ["127.0.0.1:1", "unix:/tmp/x.sock"]
