"""The policy's Landlock sandbox around commands run *through the broker*.

``test_landlock.py`` proves the ruleset on its own; here the same escapes go through
``Broker.exec`` (the ``local:`` core) and over gRPC (an in-process ``BrokerServer`` on
127.0.0.1:0 started from a policy file), with the sandbox and without it. With it, nothing
outside the root and the private temp dir changes (decoys hashed before and after) and the broker
cannot be signalled; without it, every attack succeeds: that difference is the security model
(docs/security-model.md). A policy that requires the sandbox where Landlock is missing refuses to
start.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest

from agent_side import connect
from broker import _landlock
from broker._core import Broker
from broker._landlock import SIGNAL_SCOPING_ABI, Sandbox, SandboxUnavailable, landlock_abi
from operations import Backend, ExecResult, Policy
from tests.grpc._harness import client, serving
from tests.ssh._harness import client_setup, make_keys, ssh_port

ABI = landlock_abi()
SIGNALS = ("kill the broker stand-in",)
COMMAND_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Attack:
    """One escape attempt, with its own decoys (``$OUT``, ``$HOME``, ``$LINK``, ``$N``)."""

    name: str
    script: str
    escaped: Callable[[Path, Path], bool]
    """(outside, root) -> whether the attack changed what it should not have."""


def _text_changed(path: Path, text: str) -> bool:
    return not path.exists() or path.read_text() != text


ATTACKS = [
    Attack("create outside", 'echo x > "$OUT/new"', lambda out, _: (out / "new").exists()),
    Attack(
        "modify outside",
        'echo x >> "$OUT/decoy"',
        lambda out, _: _text_changed(out / "decoy", "secret\n"),
    ),
    Attack("delete outside", 'rm -f "$OUT/decoy"', lambda out, _: not (out / "decoy").exists()),
    Attack(
        "write $HOME",
        'echo evil >> "$HOME/.bashrc"',
        lambda out, _: _text_changed(out.parent / "home" / ".bashrc", "# decoy\n"),
    ),
    Attack(
        "existing symlink from the root to outside",
        'echo x > "$LINK/via-link"',
        lambda out, _: (out / "via-link").exists(),
    ),
    Attack(
        "new symlink from the root to outside",
        'ln -s "$OUT" "$ROOT/l2-$N"; echo x > "$ROOT/l2-$N/via-new-link"',
        lambda out, _: (out / "via-new-link").exists(),
    ),
    Attack(
        "hard link to an outside file",
        'ln "$OUT/decoy" "$ROOT/hl-$N"; echo x >> "$ROOT/hl-$N"',
        lambda out, _: _text_changed(out / "decoy", "secret\n"),
    ),
    Attack(
        "mv from the root to outside",
        'mv "$ROOT/inside-$N.txt" "$OUT/"',
        lambda out, _: any(out.glob("inside-*.txt")),
    ),
    Attack(
        "mv from outside into the root",
        'mv "$OUT/decoy" "$ROOT/moved-$N"',
        lambda out, _: not (out / "decoy").exists(),
    ),
    Attack(
        "kill the broker stand-in",
        'kill -KILL "$DECOY_PID"',
        lambda out, _: not _alive(int((out / "pid").read_text())),
    ),
]


@dataclass
class Layout:
    root: Path
    cases: Path
    decoys: list[subprocess.Popen[bytes]]

    def outside(self, index: int) -> Path:
        return self.cases / f"case-{index}" / "outside"

    def env(self, index: int) -> dict[str, str]:
        case = self.cases / f"case-{index}"
        return {
            "PATH": "/usr/bin:/bin",
            "ROOT": str(self.root),
            "OUT": str(case / "outside"),
            "HOME": str(case / "home"),
            "LINK": str(self.root / f"link-{index}"),
            "N": str(index),
            "DECOY_PID": str(self.decoys[index].pid),
        }

    def outside_digest(self) -> str:
        digest = hashlib.sha256()
        for path in sorted(self.cases.rglob("*")):
            digest.update(str(path).encode())
            if path.is_file() and not path.is_symlink():
                digest.update(path.read_bytes())
        return digest.hexdigest()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[Layout]:
    """A root, and per attack: an outside decoy dir, a ``$HOME``-like decoy, a symlink from the
    root to the outside dir, a file to move out, and a stand-in "broker" process to kill."""
    root, cases = tmp_path / "root", tmp_path / "cases"
    root.mkdir()
    decoys: list[subprocess.Popen[bytes]] = []
    try:
        for index in range(len(ATTACKS)):
            outside, home = cases / f"case-{index}" / "outside", cases / f"case-{index}" / "home"
            outside.mkdir(parents=True)
            home.mkdir()
            (outside / "decoy").write_text("secret\n")
            (home / ".bashrc").write_text("# decoy\n")
            (root / f"link-{index}").symlink_to(outside)
            (root / f"inside-{index}.txt").write_text("inside\n")
            decoys.append(subprocess.Popen(["sleep", "60"]))
            (outside / "pid").write_text(str(decoys[-1].pid))
        yield Layout(root, cases, decoys)
    finally:
        for decoy in decoys:
            decoy.kill()
            decoy.wait(timeout=10)


async def _exec(backend: Backend, layout: Layout, script: str, env: dict[str, str]) -> str:
    out: list[bytes] = []
    result = await backend.exec(
        script, str(layout.root), on_data=out.append, env=env, timeout=COMMAND_TIMEOUT_S
    )
    assert result.kill_reason is None, (script, result)
    return b"".join(out).decode(errors="replace")


async def _escapes(backend: Backend, layout: Layout) -> set[str]:
    """Run every attack; return the names of those that got out."""
    escaped = set()
    for index, attack in enumerate(ATTACKS):
        await _exec(backend, layout, attack.script, layout.env(index))
        if attack.escaped(layout.outside(index), layout.root):
            escaped.add(attack.name)
    return escaped


async def _broker_signal(backend: Backend, layout: Layout) -> str:
    """``kill -0 $PPID``: may the command signal the broker (its parent)? Signal 0 probes the
    permission without hurting anything, whichever way it goes."""
    return await _exec(backend, layout, 'kill -0 "$PPID" 2>/dev/null; echo "rc=$?"', {})


async def _inside_works(backend: Backend, layout: Layout) -> None:
    """Work inside the root and the temp dir still succeeds."""
    script = (
        'set -e; echo a > "$ROOT/a"; mkdir -p "$ROOT/d/e"; mv "$ROOT/a" "$ROOT/d/e/b"; '
        'rm "$ROOT/d/e/b"; echo t > "$TMPDIR/t"; cat "$TMPDIR/t"; echo "tmp=$TMPDIR"'
    )
    env = {"PATH": "/usr/bin:/bin", "ROOT": str(layout.root), "TMPDIR": str(layout.cases)}
    output = await _exec(backend, layout, script, env)
    assert output.startswith("t\n"), output
    assert (layout.root / "d" / "e").is_dir()


def _expected_escapes_with_sandbox() -> set[str]:
    return set(SIGNALS) if ABI < SIGNAL_SCOPING_ABI else set()


def _expected_escapes_without_sandbox() -> set[str]:
    """Every file attack. Signals are scoped by the process manager whenever the kernel can
    (ABI >= 6), sandbox or not (tests/broker/test_process_signals.py shows the unscoped case)."""
    everything = {attack.name for attack in ATTACKS}
    return everything - set(SIGNALS) if ABI >= SIGNAL_SCOPING_ABI else everything


BROKER_SIGNAL = "rc=1\n" if ABI >= SIGNAL_SCOPING_ABI else "rc=0\n"
"""``kill -0 $PPID`` from a command: refused wherever signals can be scoped."""


# -- the local core -----------------------------------------------------------------------------


@asynccontextmanager
async def local_broker(root: Path, sandboxed: bool) -> AsyncIterator[tuple[Broker, str | None]]:
    """``Broker(root, sandbox=...)`` (what ``connect("local:/root", sandbox=...)`` builds), and the
    private temp dir commands get (``None`` without a sandbox)."""
    sandbox = None
    if sandboxed:
        sandbox = Sandbox.for_policy(_policy("landlock"), str(root))
        assert sandbox is not None
    try:
        async with Broker(str(root), sandbox=sandbox) as broker:
            yield broker, sandbox.tmpdir if sandbox is not None else None
    finally:
        if sandbox is not None:
            sandbox.close()


def _policy(mode: str) -> Policy:
    return Policy.from_mapping({"sandbox": {"mode": mode}})


async def test_local_commands_escape_without_the_sandbox(layout: Layout) -> None:
    async with local_broker(layout.root, sandboxed=False) as (broker, _):
        assert broker.capabilities()["command_sandbox"] is False
        assert await _escapes(broker, layout) == _expected_escapes_without_sandbox()
        assert await _broker_signal(broker, layout) == BROKER_SIGNAL
        await _inside_works(broker, layout)


async def test_local_commands_are_contained_by_the_sandbox(layout: Layout) -> None:
    if ABI == 0:
        with pytest.raises(SandboxUnavailable):
            Sandbox.for_policy(_policy("landlock"), str(layout.root))
        return
    before = layout.outside_digest()
    async with local_broker(layout.root, sandboxed=True) as (broker, tmpdir):
        assert broker.capabilities()["command_sandbox"] is True
        assert await _escapes(broker, layout) == _expected_escapes_with_sandbox()
        if ABI >= SIGNAL_SCOPING_ABI:
            assert await _broker_signal(broker, layout) == "rc=1\n"
        await _inside_works(broker, layout)
        # The caller's TMPDIR (outside) was replaced by the sandbox's private one.
        assert tmpdir is not None and (Path(tmpdir) / "t").read_text() == "t\n"
        assert not (layout.cases / "t").exists()
    if ABI >= SIGNAL_SCOPING_ABI:
        assert layout.outside_digest() == before
        assert all(_alive(decoy.pid) for decoy in layout.decoys)


@pytest.mark.skipif(ABI == 0, reason="needs Landlock: the fail-closed tests cover its absence")
async def test_read_only_with_the_sandbox_binds_commands(tmp_path: Path) -> None:
    """``read_only = true`` used to stop file operations only: ``touch newfile`` succeeded."""
    root = tmp_path / "ROOT"
    root.mkdir()
    (root / "kept.txt").write_text("kept\n")
    policy = Policy.from_mapping({"read_only": True, "sandbox": {"mode": "landlock"}})
    sandbox = Sandbox.for_policy(policy, str(root))
    assert sandbox is not None
    try:
        async with Broker(str(root), sandbox=sandbox) as broker:
            out: list[bytes] = []
            script = (
                'touch newfile; echo x >> kept.txt; mkdir d; cat kept.txt; echo t > "$TMPDIR/t"; '
                'cat "$TMPDIR/t"'
            )
            result = await broker.exec(
                script, str(root), on_data=out.append, timeout=COMMAND_TIMEOUT_S
            )
            assert result.kill_reason is None
    finally:
        sandbox.close()
    assert b"".join(out).decode().count("Permission denied") == 3
    assert b"kept\nt\n" in b"".join(out)  # the root reads, the private temp dir writes
    assert sorted(p.name for p in root.iterdir()) == ["kept.txt"]
    assert (root / "kept.txt").read_text() == "kept\n"


async def test_connect_local_takes_the_sandbox(layout: Layout) -> None:
    """``connect("local:/root", sandbox=...)`` builds the same sandboxed core."""
    if ABI == 0:
        return  # the sandbox cannot be built: see the fail-closed tests
    sandbox = Sandbox.for_policy(_policy("landlock"), str(layout.root))
    assert sandbox is not None
    try:
        async with connect(f"local:{layout.root}", sandbox=sandbox) as ops:
            assert isinstance(ops, Broker) and ops.sandbox is sandbox
            await _exec(ops, layout, ATTACKS[0].script, layout.env(0))
    finally:
        sandbox.close()
    assert not (layout.outside(0) / "new").exists()


async def test_powershell_runs_in_the_sandbox_too(layout: Layout) -> None:
    """The PowerShell path goes through the same manager. A stand-in ``pwsh`` (no real one
    here: a script that runs its ``-Command`` with sh, placed in the root so that the sandbox
    lets it execute) tries to write outside: refused with the sandbox, done without it."""
    if ABI == 0:
        return  # the sandbox cannot be built: see the fail-closed tests
    bindir = layout.root / "bin"
    bindir.mkdir()
    pwsh = bindir / "pwsh"
    pwsh.write_text('#!/bin/sh\nfor a; do last="$a"; done\nexec /bin/sh -c "$last"\n')
    pwsh.chmod(0o755)
    out = layout.outside(0)
    script = f'echo x > "{out}/from-pwsh"; echo ok > "{layout.root}/from-pwsh"'
    env = {"PATH": f"{bindir}:/usr/bin:/bin"}
    for sandboxed in (False, True):
        async with local_broker(layout.root, sandboxed=sandboxed) as (broker, _):
            # powershell_argv looks pwsh up on the broker's own PATH.
            with mock.patch.dict(os.environ, env):
                result = await broker.powershell.exec(
                    script, str(layout.root), on_data=lambda _: None, timeout=COMMAND_TIMEOUT_S
                )
        assert result == ExecResult(0)
        assert (layout.root / "from-pwsh").read_text() == "ok\n"
        assert (out / "from-pwsh").exists() is not sandboxed, f"sandboxed={sandboxed}"
        (layout.root / "from-pwsh").unlink()
        if not sandboxed:
            (out / "from-pwsh").unlink()


# -- over gRPC, from a policy file --------------------------------------------------------------


def _write_policy(tmp_path: Path, mode: str) -> Path:
    path = tmp_path / f"policy-{mode}.toml"
    path.write_text(f'[sandbox]\nmode = "{mode}"\n')
    return path


@pytest.mark.parametrize("mode", ["none", "landlock"])
async def test_grpc_commands_follow_the_policy_sandbox(
    layout: Layout, tmp_path: Path, mode: str
) -> None:
    """``serve --policy FILE`` with ``sandbox.mode``: the same attacks over gRPC."""
    policy = _write_policy(tmp_path, mode)
    if mode == "landlock" and ABI == 0:
        with pytest.raises(SandboxUnavailable):
            async with serving(tmp_path, None, root=layout.root, policy=policy):
                pass
        return
    before = layout.outside_digest()
    async with serving(tmp_path, None, root=layout.root, policy=policy) as server:
        assert server.enforcement is not None
        assert (server.enforcement.sandbox is not None) is (mode == "landlock")
        async with client(server) as ops:
            escaped = await _escapes(ops, layout)
            signal = await _broker_signal(ops, layout)
            await _inside_works(ops, layout)
    if mode == "none":
        assert escaped == _expected_escapes_without_sandbox()
        assert signal == BROKER_SIGNAL
        return
    assert escaped == _expected_escapes_with_sandbox()
    if ABI >= SIGNAL_SCOPING_ABI:
        assert signal == "rc=1\n"
        assert layout.outside_digest() == before


async def test_a_core_handed_to_the_server_gets_the_policy_sandbox(
    layout: Layout, tmp_path: Path
) -> None:
    """An embedder's ``Broker`` served under a sandboxing policy never runs commands bare."""
    if ABI == 0:
        return  # the server refuses to start: see below
    policy = _write_policy(tmp_path, "landlock")
    async with (
        Broker(str(layout.root)) as core,
        serving(tmp_path, core, root=layout.root, policy=policy) as server,
    ):
        assert server.enforcement is not None
        assert core.sandbox is server.enforcement.sandbox is not None
        await _exec(core, layout, ATTACKS[0].script, layout.env(0))
    assert not (layout.outside(0) / "new").exists()


async def test_a_required_sandbox_without_landlock_refuses_to_serve(
    monkeypatch: pytest.MonkeyPatch, layout: Layout, tmp_path: Path
) -> None:
    """Fail closed: with Landlock reported missing, ``sandbox.mode = "landlock"`` stops the
    server at start (nothing listens, no command runs); ``auto`` serves without it."""
    monkeypatch.setattr(_landlock, "landlock_abi", lambda: 0)
    with pytest.raises(SandboxUnavailable, match="requires Landlock"):
        async with serving(
            tmp_path, None, root=layout.root, policy=_write_policy(tmp_path, "landlock")
        ):
            pytest.fail("the server started without the sandbox it requires")
    async with serving(
        tmp_path, None, root=layout.root, policy=_write_policy(tmp_path, "auto")
    ) as server:
        assert server.enforcement is not None
        assert server.enforcement.sandbox is None
        assert server.enforcement.capabilities()["sandbox"] == {
            "mode": "auto",
            "active": False,
            "landlock_abi": 0,
            "signal_scoping": False,
        }


async def test_ssh_commands_run_in_the_policy_sandbox(layout: Layout, tmp_path: Path) -> None:
    """``serve --ssh`` shares the core, so its commands get the same sandbox."""
    if ABI == 0:
        return  # the server refuses to start: see the test above
    client_key, authorized = make_keys(tmp_path / "keys")
    host_key = tmp_path / "keys" / "host_ed25519"
    before = layout.outside_digest()
    async with serving(
        tmp_path,
        None,
        root=layout.root,
        policy=_write_policy(tmp_path, "landlock"),
        grpc=[],
        ssh=["127.0.0.1:0"],
        ssh_authorized_keys=authorized,
        ssh_host_key=host_key,
    ) as server:
        assert server.enforcement is not None and server.enforcement.sandbox is not None
        tmpdir = server.enforcement.sandbox.tmpdir
        setup = client_setup(ssh_port(server), client_key, host_key, tmp_path / "known_hosts")
        async with setup.backend() as ops:
            # The attacks' variables arrive (else they would aim at "/" and prove nothing).
            probe = await _exec(ops, layout, 'echo "$OUT|$TMPDIR"', layout.env(0))
            assert probe == f"{layout.outside(0)}|{tmpdir}\n"
            escaped = await _escapes(ops, layout)
            signal = await _broker_signal(ops, layout)
    assert escaped == _expected_escapes_with_sandbox()
    if ABI >= SIGNAL_SCOPING_ABI:
        assert signal == "rc=1\n"
        assert layout.outside_digest() == before
