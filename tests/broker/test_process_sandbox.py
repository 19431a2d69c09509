"""The process manager with the policy's Landlock sandbox, in cgroup and fallback modes.

The sandboxed command is still tracked and killed whole (the broker moves the gated trampoline
into its cgroup, since a sandboxed process cannot write ``cgroup.procs``), gets the private temp
dir as ``TMPDIR``, and cannot write outside the root.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker._landlock import Sandbox, SandboxUnavailable, landlock_abi
from broker._shell import bash_argv
from operations import ExecResult, KillReason

from ._procscan import marked_env, new_marker, survivors
from .conftest import CGROUPS, make_manager

SANDBOX_MODES = (["cgroup"] if CGROUPS else []) + ["fallback"]


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox | None]:
    """The sandbox; on a kernel without Landlock, ``None`` after checking that it refuses to
    build (nothing can then run unsandboxed by mistake): the tests stop there and say so."""
    for name in ("root", "tmp", "outside"):
        (tmp_path / name).mkdir()
    if landlock_abi() < 1:
        with pytest.raises(SandboxUnavailable):
            Sandbox(str(tmp_path / "root"), str(tmp_path / "tmp"))
        yield None
        return
    box = Sandbox(str(tmp_path / "root"), str(tmp_path / "tmp"))
    try:
        yield box
    finally:
        box.close()


@pytest.mark.parametrize("mode", SANDBOX_MODES)
async def test_a_sandboxed_tree_is_confined_tracked_and_killed(
    mode: str, sandbox: Sandbox | None, tmp_path: Path
) -> None:
    if sandbox is None:
        return  # no Landlock: the fixture checked the refusal
    marker = new_marker()
    pm = make_manager(mode, sandbox=sandbox)
    caps = pm.capabilities()
    assert caps.sandbox and caps.cgroup_kill is (mode == "cgroup")
    assert caps.signal_scope is sandbox.signal_scoping
    out: list[bytes] = []
    script = (
        f'{{ echo x > "{tmp_path}/outside/f"; }} 2>/dev/null || echo denied; echo ok > f; '
        'echo "$TMPDIR"; setsid sleep 1000 & ( setsid sh -c "sleep 1000" & ); '
        "cat /proc/self/cgroup | grep -c opsbroker; exit 0"
    )
    try:
        result = await pm.exec(
            bash_argv(script),
            cwd=sandbox.root,
            on_data=out.append,
            timeout=20,
            env={**marked_env(marker), "TMPDIR": str(tmp_path / "outside")},
        )
    finally:
        await pm.aclose()
    lines = b"".join(out).decode().split()
    assert result == ExecResult(0)
    assert lines[:2] == ["denied", sandbox.tmpdir]
    assert lines[2] == ("1" if mode == "cgroup" else "0")  # in its own cgroup before forking
    assert not (tmp_path / "outside" / "f").exists()
    assert (tmp_path / "root" / "f").read_text() == "ok\n"
    assert survivors(marker) == []


@pytest.mark.parametrize("mode", SANDBOX_MODES)
async def test_a_sandboxed_command_times_out_like_any_other(
    mode: str, sandbox: Sandbox | None
) -> None:
    if sandbox is None:
        return  # no Landlock: the fixture checked the refusal
    marker = new_marker()
    pm = make_manager(mode, sandbox=sandbox)
    try:
        result = await pm.exec(
            bash_argv("trap '' TERM; sleep 1000 & wait"),
            cwd=sandbox.root,
            on_data=lambda _: None,
            timeout=0.5,
            env=marked_env(marker),
        )
    finally:
        await pm.aclose()
    assert result == ExecResult(None, KillReason.TIMEOUT)
    assert survivors(marker) == []


async def test_a_closed_sandbox_starts_nothing(sandbox: Sandbox | None, tmp_path: Path) -> None:
    """Fail closed: never run a command without the sandbox it was given."""
    if sandbox is None:
        return  # no Landlock: the fixture checked the refusal
    pm = make_manager("fallback", sandbox=sandbox)
    sandbox.close()
    try:
        with pytest.raises(Exception, match="could not start"):
            await pm.exec(
                bash_argv("echo ran > f"), cwd=str(tmp_path / "root"), on_data=lambda _: None
            )
    finally:
        await pm.aclose()
    assert not (tmp_path / "root" / "f").exists()
