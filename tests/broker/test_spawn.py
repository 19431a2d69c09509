"""The native spawner's contract with the command, seen from inside the command.

Between fork and exec :mod:`broker._spawn` runs system calls only: these tests check what the
command inherits (signal dispositions and mask, fds, session, cgroup, Landlock domain) and that
each failing step comes back as a clear error, with no child left behind.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from broker import _spawn
from broker._process import ProcessManager
from operations import ExecResult, InvalidArgument, NotFound, PermissionDenied

from ._procscan import marked_env, new_marker, survivors
from .conftest import CGROUPS, make_manager

pytestmark = pytest.mark.anyio


async def run(pm: ProcessManager, argv: list[str], **kwargs: object) -> tuple[ExecResult, str]:
    output: list[bytes] = []
    kwargs.setdefault("cwd", "/")
    result = await pm.exec(argv, on_data=output.append, **kwargs)  # type: ignore[arg-type]
    return result, b"".join(output).decode()


def _status(text: str) -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def _own_status() -> dict[str, str]:
    with open("/proc/self/status") as f:
        return _status(f.read())


async def test_signals_start_at_their_defaults(manager: ProcessManager) -> None:
    # Python ignores SIGPIPE and may block or catch others; none of that reaches the command.
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
    previous = signal.signal(signal.SIGUSR1, lambda *_: None)
    try:
        assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
        result, out = await run(manager, ["cat", "/proc/self/status"])
    finally:
        signal.signal(signal.SIGUSR1, previous)
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    status = _status(out)
    assert result == ExecResult(0)
    assert int(status["SigIgn"], 16) == 0, status["SigIgn"]
    assert int(status["SigCgt"], 16) == 0, status["SigCgt"]
    # The caller's mask is restored for the command, as subprocess does.
    assert int(status["SigBlk"], 16) == 1 << (signal.SIGUSR2 - 1)


async def test_sigpipe_ends_a_writer(manager: ProcessManager) -> None:
    result, out = await run(manager, ["sh", "-c", "yes | head -c 3; echo; echo ${PIPESTATUS:-x}"])
    assert result == ExecResult(0)
    assert out.startswith("y\ny")


async def test_only_stdio_is_inherited(manager: ProcessManager, tmp_path: Path) -> None:
    # An fd the broker holds without O_CLOEXEC must still not reach the command.
    leaky = os.open(tmp_path, os.O_RDONLY)
    os.set_inheritable(leaky, True)
    try:
        result, out = await run(manager, ["ls", "/proc/self/fd"])
    finally:
        os.close(leaky)
    assert result == ExecResult(0)
    assert sorted(int(fd) for fd in out.split()) == [0, 1, 2, 3]  # 3: ls's own directory fd


async def test_new_session_and_stdin_at_dev_null(manager: ProcessManager) -> None:
    result, out = await run(
        manager, ["sh", "-c", "cat; echo $$ $(ps -o sid= -p $$); readlink /proc/self/fd/0"]
    )
    assert result == ExecResult(0)
    pid, sid, stdin = out.split()
    assert pid == sid
    assert stdin == "/dev/null"


@pytest.mark.skipif(not CGROUPS, reason="needs a writable cgroup v2 tree")
async def test_the_command_is_in_its_cgroup_from_the_start() -> None:
    pm = make_manager("cgroup")
    try:
        result, out = await run(pm, ["cat", "/proc/self/cgroup"])
    finally:
        await pm.aclose()
    assert result == ExecResult(0)
    v2 = next(line for line in out.splitlines() if line.startswith("0::"))
    assert "/opsbroker-" in v2 and v2.rsplit("/", 1)[1].startswith("cmd-"), v2


async def test_the_broker_stays_outside_the_commands_domain(manager: ProcessManager) -> None:
    before = _own_status()
    await run(manager, ["true"])
    after = _own_status()
    assert after["NoNewPrivs"] == before["NoNewPrivs"]
    # Still able to signal a process of its own that no command domain covers.
    os.kill(os.getpid(), 0)


def _zombie_children() -> set[int]:
    me, found = os.getpid(), set()
    for name in os.listdir("/proc"):
        try:
            raw = Path(f"/proc/{name}/stat").read_bytes() if name.isdigit() else b""
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2 :].split()
        if fields and fields[0] == b"Z" and int(fields[1]) == me:
            found.add(int(name))
    return found


async def test_program_errors(manager: ProcessManager, tmp_path: Path) -> None:
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\necho hi\n")
    marker = new_marker()
    env = marked_env(marker)
    zombies = _zombie_children()
    with pytest.raises(NotFound, match="program not found"):
        await run(manager, ["no-such-program-here"], env=env)
    with pytest.raises(NotFound, match="program not found"):
        await run(manager, [str(tmp_path / "missing")], env=env)
    with pytest.raises(PermissionDenied):
        await run(manager, [str(script)], env=env)
    with pytest.raises(NotFound, match="working directory"):
        await run(manager, ["true"], cwd=str(tmp_path / "gone"), env=env)
    # A start that failed leaves no process and no zombie behind.
    assert not survivors(marker)
    assert _zombie_children() <= zombies


async def test_path_lookup_uses_the_commands_path(manager: ProcessManager, tmp_path: Path) -> None:
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    tool = tmp_path / "second" / "opsbroker-probe"
    tool.write_text("#!/bin/sh\necho found\n")
    tool.chmod(0o755)
    env = {"PATH": f"{tmp_path / 'first'}:{tmp_path / 'second'}"}
    result, out = await run(manager, ["opsbroker-probe"], env=env)
    assert (result, out) == (ExecResult(0), "found\n")


@pytest.mark.parametrize(
    ("argv", "env"),
    [(["echo", "a\0b"], None), (["true"], {"A=B": "1"}), (["true"], {"A": "x\0y"})],
)
async def test_nul_and_bad_names_are_refused(
    manager: ProcessManager, argv: list[str], env: dict[str, str] | None
) -> None:
    with pytest.raises(InvalidArgument):
        await run(manager, argv, env=env)


def test_the_extension_checks_its_arguments() -> None:
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        with pytest.raises(ValueError, match="required"):
            _spawn.spawn([b"/bin/true"], [b"true"], [], stdin_fd=null, stdout_fd=-1)
        with pytest.raises(ValueError, match="required"):
            _spawn.spawn([], [b"true"], [], stdin_fd=null, stdout_fd=null)
        with pytest.raises(ValueError, match="bytes"):
            _spawn.spawn(["/bin/true"], [b"true"], [], stdin_fd=null, stdout_fd=null)  # type: ignore[list-item]
        with pytest.raises(OSError) as failed:
            _spawn.spawn([b"/bin/true"], [b"true"], [], stdin_fd=null, stdout_fd=null, cwd_fd=999)
        assert failed.value.filename == "cwd"
    finally:
        os.close(null)
