"""Terminal sessions from a stock OpenSSH client (``ssh -t``, ``ssh`` with no command).

The session is a process started on a pseudo-terminal, as ``start(pty=...)`` starts one: these
tests drive ``/usr/bin/ssh`` against the broker on loopback and check what a user sees (a
terminal, its size, a resize, ``^C``, the exit status) and what the broker promises (the tree dies
with the channel, the policy's sandbox and exec switch apply). Where ``ssh`` must see a window
change it runs on a terminal this test opens, as a user's terminal emulator would.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import os
import re
import shutil
import signal
import struct
import termios
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker import Broker
from broker._audit import read_records
from broker._landlock import landlock_abi
from operations import ProcessState
from tests.broker._procscan import MARK_VAR, new_marker, survivors
from tests.conformance._workspace import DiskWorkspace
from tests.grpc._harness import serving
from tests.ssh._harness import SSHSetup, client_setup, make_keys, serve_over_ssh, ssh_port
from tests.ssh._procs import wait_for

pytestmark = pytest.mark.anyio

SSH = shutil.which("ssh") or "/usr/bin/ssh"
DEADLINE_S = 20.0


def _argv(setup: SSHSetup, *options: str) -> list[str]:
    return [
        SSH,
        "-F",
        "/dev/null",
        "-i",
        str(setup.client_key),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        f"UserKnownHostsFile={setup.known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "LogLevel=ERROR",
        "-p",
        str(setup.port),
        *options,
        "agent@127.0.0.1",
    ]


async def ssh_tt(setup: SSHSetup, command: str | None, stdin: bytes = b"") -> tuple[int, str]:
    """``ssh -tt`` (a terminal although stdin is a pipe) fed ``stdin``: exit status and output."""
    argv = _argv(setup, "-tt") + ([] if command is None else [command])
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(stdin), DEADLINE_S)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


def _set_size(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _own_terminal(slave: int) -> None:
    """In the child: a new session whose controlling terminal is ``slave``. By its fd, not as
    stdin: uvloop runs this before it sets up the child's stdio, asyncio after."""
    os.setsid()
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)


class Terminal:
    """``ssh`` running on a pseudo-terminal of this test's, as in a terminal emulator."""

    def __init__(self, proc: asyncio.subprocess.Process, master: int) -> None:
        self.proc = proc
        self.master = master
        self.seen = b""

    @classmethod
    async def open(cls, argv: list[str], cols: int, rows: int) -> Terminal:
        master, slave = os.openpty()
        _set_size(master, cols, rows)
        os.set_blocking(master, False)
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            preexec_fn=functools.partial(_own_terminal, slave),
        )
        os.close(slave)
        return cls(proc, master)

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def resize(self, cols: int, rows: int) -> None:
        """Set the size; the kernel sends ``ssh`` SIGWINCH, and ``ssh`` a window change."""
        _set_size(self.master, cols, rows)

    async def expect(self, pattern: str) -> re.Match[bytes]:
        """Read until ``pattern`` appears in the output (within the deadline)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE_S
        compiled = re.compile(pattern.encode())
        while (found := compiled.search(self.seen)) is None:
            assert loop.time() < deadline, f"no {pattern!r} in {self.seen!r}"
            try:
                self.seen += os.read(self.master, 65536)
            except BlockingIOError:
                await asyncio.sleep(0.02)
            except OSError:  # EIO: ssh exited and closed the terminal
                raise AssertionError(f"ssh ended before {pattern!r}: {self.seen!r}") from None
        return found

    async def exit_status(self) -> int:
        return await asyncio.wait_for(self.proc.wait(), DEADLINE_S)

    async def close(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        os.close(self.master)


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[str, str]:
    """The root and a decoy directory beside it, as real paths (what ``pwd`` prints)."""
    root, outside = DiskWorkspace.create_dirs(tmp_path)
    return os.path.realpath(root), os.path.realpath(outside)


@pytest.fixture
async def setup(tmp_path: Path, dirs: tuple[str, str]) -> AsyncIterator[SSHSetup]:
    async with Broker(dirs[0]) as broker, serve_over_ssh(broker, tmp_path / "keys") as running:
        yield running


@pytest.fixture
async def terminal(setup: SSHSetup) -> AsyncIterator[list[Terminal]]:
    opened: list[Terminal] = []
    try:
        yield opened
    finally:
        for term in opened:
            await term.close()


async def test_a_command_on_a_terminal_sees_a_terminal_at_the_root(
    setup: SSHSetup, dirs: tuple[str, str]
) -> None:
    code, out = await ssh_tt(setup, "tty; stty size; pwd; echo TERM=$TERM; exit 3")
    assert code == 3, out
    lines = out.splitlines()
    assert re.fullmatch(r"/dev/pts/\d+", lines[0]), out
    assert lines[1] == "24 80"  # ssh's stdin is no terminal: its size is unknown, 80x24 here
    assert lines[2] == dirs[0]
    assert "TERM=" in lines[3] and lines[3] != "TERM=", out
    assert "\r\n" in out  # the terminal's own line discipline (onlcr), not a pipe


async def test_the_size_and_a_resize_reach_the_process(
    setup: SSHSetup, terminal: list[Terminal]
) -> None:
    script = (
        "stty size; trap 'stty size' WINCH; echo READY; "
        "for i in $(seq 200); do sleep 0.1; done; echo TIMED-OUT"
    )
    term = await Terminal.open([*_argv(setup, "-t"), script], cols=100, rows=30)
    terminal.append(term)
    await term.expect(r"30 100\r\n")
    await term.expect("READY")
    term.resize(132, 43)
    await term.expect(r"43 132\r\n")


async def test_ctrl_c_ends_a_sleep_and_the_status_says_so(
    setup: SSHSetup, terminal: list[Terminal]
) -> None:
    term = await Terminal.open([*_argv(setup, "-t"), "echo GO; sleep 1000"], cols=80, rows=24)
    terminal.append(term)
    await term.expect("GO")
    await asyncio.sleep(0.2)  # let bash start sleep
    term.type(b"\x03")
    assert await term.exit_status() == 255  # OpenSSH's status for an exit-signal
    core = setup.frontend.backend
    assert isinstance(core, Broker)
    [end] = await core.processes.list_processes()
    assert (end.state, end.exit_code, end.signal) == (
        ProcessState.EXITED,
        None,
        signal.SIGINT,
    )


async def test_ssh_without_a_command_is_an_interactive_shell(
    setup: SSHSetup, terminal: list[Terminal], dirs: tuple[str, str]
) -> None:
    term = await Terminal.open(_argv(setup), cols=90, rows=20)
    terminal.append(term)
    term.type(b"echo $((6*7))-$-; stty size; pwd\r")
    found = await term.expect(r"42-(\S+)\r\n20 90\r\n(.*)\r\n")
    assert b"i" in found[1]  # an interactive shell
    assert found[2].decode() == dirs[0]
    term.type(b"exit 7\r")
    assert await term.exit_status() == 7


async def test_commands_piped_into_an_interactive_shell(setup: SSHSetup) -> None:
    code, out = await ssh_tt(setup, None, b"echo $((6*7))\nexit 5\n")
    assert code == 5, out
    assert "\r42\r\n" in out  # the echoed line, then its output (after readline's codes)


async def test_end_of_input_ends_cat_on_the_terminal(setup: SSHSetup) -> None:
    code, out = await ssh_tt(setup, "cat; echo CAT-DONE", b"line one\n")
    assert code == 0, out
    assert "line one" in out and "CAT-DONE" in out


async def test_a_dropped_channel_leaves_no_survivor(setup: SSHSetup) -> None:
    """ssh SIGKILLed: setsid, double-fork, nohup and TERM-ignoring children all die with it."""
    mark = new_marker()
    script = (
        f"export {MARK_VAR}={mark}; "
        "setsid sleep 1000 & "
        "( sleep 1000 & ) ; "
        "nohup sleep 1000 >/dev/null 2>&1 & "
        "( trap '' TERM; exec sleep 1000 ) & "
        "echo STARTED; sleep 1000"
    )
    proc = await asyncio.create_subprocess_exec(
        *_argv(setup, "-tt"),
        script,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert await wait_for(lambda: len(survivors(mark)) >= 5, DEADLINE_S), survivors(mark)
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert await wait_for(lambda: survivors(mark) == [], 10.0), survivors(mark)


async def test_a_session_is_a_started_process(setup: SSHSetup) -> None:
    """It is listed among the broker's processes while it runs (same table, same limits)."""
    proc = await asyncio.create_subprocess_exec(
        *_argv(setup, "-tt"),
        "echo UP; sleep 1000",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        assert b"UP" in await asyncio.wait_for(proc.stdout.readline(), DEADLINE_S)
        core = setup.frontend.backend
        assert isinstance(core, Broker)
        running = [p for p in await core.processes.list_processes() if p.running]
        assert [(p.command, p.pty is not None) for p in running] == [("echo UP; sleep 1000", True)]
    finally:
        proc.kill()
        await proc.wait()


# -- through the served broker: policy, sandbox and audit ----------------------------------------


async def _served(tmp_path: Path, policy: str) -> tuple[Path, dict[str, object]]:
    client_key, authorized = make_keys(tmp_path / "keys")
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(policy)
    return client_key, {
        "grpc": [],
        "ssh": ["127.0.0.1:0"],
        "ssh_authorized_keys": authorized,
        "ssh_host_key": tmp_path / "keys" / "host_ed25519",
        "policy": policy_file,
        "audit_log": tmp_path / "audit.jsonl",
    }


def _setup_of(server: object, client_key: Path, tmp_path: Path) -> SSHSetup:
    host_key = tmp_path / "keys" / "host_ed25519"
    return client_setup(ssh_port(server), client_key, host_key, tmp_path / "known_hosts")


def _files(root: str, outside: str) -> tuple[bool, str]:
    """Whether the decoy directory gained a file, and what the session wrote in the root."""
    return os.path.exists(os.path.join(outside, "new")), Path(root, "mine").read_text()


async def test_an_exec_disabled_policy_refuses_a_shell(tmp_path: Path) -> None:
    client_key, config = await _served(tmp_path, "[exec]\nenabled = false\n")
    async with serving(tmp_path, None, **config) as server:
        setup = _setup_of(server, client_key, tmp_path)
        code, out = await ssh_tt(setup, None)
        assert code == 1 and "denied by policy" in out, out
        code, out = await ssh_tt(setup, "echo should-not-run")
        assert code == 1 and "should-not-run" not in out.replace("echo should-not-run", "")
    denied = [r for r in read_records([tmp_path / "audit.jsonl"]) if r.get("decision") == "deny"]
    assert [r["op"] for r in denied] == ["start_process", "start_process"], denied


@pytest.mark.skipif(landlock_abi() == 0, reason="the kernel has no Landlock")
async def test_the_sandbox_confines_a_terminal_session(
    tmp_path: Path, dirs: tuple[str, str]
) -> None:
    """With the policy's Landlock sandbox, a shell on a terminal can ``cd ..`` (bash may), but
    cannot read the decoy outside the root nor write outside it; inside the root it works."""
    root, outside = dirs
    client_key, config = await _served(tmp_path, '[sandbox]\nmode = "landlock"\n')
    async with serving(tmp_path, None, root=root, **config) as server:
        setup = _setup_of(server, client_key, tmp_path)
        script = (
            f"cat {outside}/secret; echo READ=$?; "
            f"echo x > {outside}/new; echo WROTE=$?; "
            "cd .. && ls >/dev/null 2>&1; echo LS=$?; "
            f"cd {root} && echo inside > mine && cat mine"
        )
        code, out = await ssh_tt(setup, script)
    assert code == 0, out
    assert "outside secret" not in out, out
    assert "secret: Permission denied" in out and "READ=1" in out, out
    assert "WROTE=1" in out and "LS=2" in out, out  # the root's parent cannot even be listed
    assert "inside" in out
    assert _files(root, outside) == (False, "inside\n")
    records = list(read_records([tmp_path / "audit.jsonl"]))
    starts = [r for r in records if r.get("op") == "start_process"]
    assert len(starts) == 1 and starts[0]["transport"] == "ssh", starts
    assert any(r.get("op") == "process_exit" for r in records), records


async def test_a_signal_that_ends_a_command_is_reported(setup: SSHSetup) -> None:
    """Over the subsystem (the ExecExit's ``signal``) and to stock ssh (an ``exit-signal``)."""
    async with setup.backend() as client:
        result = await client.exec("kill -TERM $$", client.root, on_data=lambda _: None)
    assert (result.exit_code, result.signal, result.kill_reason) == (None, signal.SIGTERM, None)
    code, _ = await ssh_tt(setup, "kill -TERM $$")
    assert code == 255  # what OpenSSH exits with for an exit-signal


async def test_a_client_that_reads_late_still_gets_every_line(setup: SSHSetup) -> None:
    """As with sshd, a terminal session's output waits for a slow client and none is lost:
    ``ssh -tt`` whose output this test leaves unread for 3 s gets all of ``seq``'s 17 MB."""
    last = 2_000_000
    proc = await asyncio.create_subprocess_exec(
        *_argv(setup, "-tt"),
        f"seq 1 {last}",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await asyncio.sleep(3)  # ssh fills its pipe to us, then stops reading the channel
        assert proc.stdout is not None
        out = await asyncio.wait_for(proc.stdout.read(), DEADLINE_S)
        assert await asyncio.wait_for(proc.wait(), DEADLINE_S) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    lines = out.split(b"\r\n")
    assert lines[-1] == b"" and len(lines) == last + 1  # every line, on a terminal's line ends
    assert lines[:-1] == [b"%d" % n for n in range(1, last + 1)]
