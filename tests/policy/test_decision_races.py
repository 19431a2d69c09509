"""The policy is decided on the path that is opened: a symlink swapped between an allowed file and
a denied one, as fast as a thread can swap it, never lets denied content out or a denied write in.

Each case runs one operation at least :data:`ITERATIONS` times while a thread flips a link inside
the root between an allowed target and a denied one (``os.replace`` of a fresh link: the name
always exists). Every call must either succeed on the allowed target or be refused with
``PolicyDenied``; any other outcome (denied content, a changed hook, another error type, an
``INTERNAL`` or "internal broker error") fails the test. Run on the core with both resolvers,
over gRPC and over SSH, each behind the default policy as ``opsbroker serve`` applies it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from broker import Broker
from broker._guard import Enforcement
from operations import Backend, Policy, PolicyDenied
from tests.grpc._harness import client, serving
from tests.ssh._harness import client_setup, make_keys, ssh_port

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ITERATIONS = 1000
MAX_SECONDS = 60.0  # a bound on each case, far above what 1000 calls take
SECRET = b"TOKEN=hunter2-secret\n"
ALLOWED = b"nothing to see\n"
HOOK = b"#!/bin/sh\necho original hook\n"


def layout(root: Path) -> None:
    (root / "ok.txt").write_bytes(ALLOWED)
    (root / ".env").write_bytes(SECRET)
    (root / "ok2.txt").write_bytes(ALLOWED)
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".git" / "hooks" / "pre-commit").write_bytes(HOOK)
    (root / "okdir").mkdir()
    (root / "okdir" / "a.txt").write_bytes(ALLOWED)
    (root / ".ssh").mkdir()
    (root / ".ssh" / "stolen-key").write_bytes(SECRET)


class Flipper:
    """A thread that points ``link`` at ``a`` and ``b`` in turn, atomically, until stopped."""

    def __init__(self, link: Path, a: str, b: str) -> None:
        self.link, self.targets = link, (a, b)
        self.flips = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        os.symlink(a, link)

    def _run(self) -> None:
        spare = self.link.with_name(self.link.name + ".new")
        deadline = time.monotonic() + MAX_SECONDS
        while not self._stop.is_set() and time.monotonic() < deadline:
            with contextlib.suppress(FileNotFoundError):
                spare.unlink()
            os.symlink(self.targets[self.flips % 2 == 0], spare)
            os.replace(spare, self.link)
            self.flips += 1

    def __enter__(self) -> Flipper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


async def race(call: Callable[[], Awaitable[str]]) -> Counter[str]:
    """Run ``call`` :data:`ITERATIONS` times; count its outcomes (``PolicyDenied`` is "denied",
    any other exception its type name, which the caller treats as a failure)."""
    outcomes: Counter[str] = Counter()
    deadline = time.monotonic() + MAX_SECONDS
    for _ in range(ITERATIONS):
        try:
            outcomes[await call()] += 1
        except PolicyDenied:
            outcomes["denied"] += 1
        except Exception as exc:
            outcomes[f"{type(exc).__name__}: {exc}"] += 1
        if time.monotonic() > deadline:
            break
    return outcomes


# --- the transports ------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def local(tmp_path: Path, resolver: str) -> AsyncIterator[Backend]:
    root = tmp_path / "ROOT"
    root.mkdir()
    layout(root)
    enforcement = Enforcement.start(Policy(), str(root))
    try:
        async with Broker(str(root), resolver=resolver) as core:
            yield enforcement.wrap(core, principal="race", transport="local")
    finally:
        enforcement.close()


@contextlib.asynccontextmanager
async def over_grpc(tmp_path: Path) -> AsyncIterator[Backend]:
    (tmp_path / "ROOT").mkdir()
    layout(tmp_path / "ROOT")
    async with serving(tmp_path, None) as server, client(server) as ops:
        yield ops


@contextlib.asynccontextmanager
async def over_ssh(tmp_path: Path) -> AsyncIterator[Backend]:
    (tmp_path / "ROOT").mkdir()
    layout(tmp_path / "ROOT")
    client_key, authorized = make_keys(tmp_path / "keys")
    host_key = tmp_path / "keys" / "host_ed25519"
    async with serving(
        tmp_path,
        None,
        grpc=[],
        ssh=["127.0.0.1:0"],
        ssh_authorized_keys=authorized,
        ssh_host_key=host_key,
    ) as server:
        setup = client_setup(ssh_port(server), client_key, host_key, tmp_path / "known_hosts")
        async with setup.backend() as ops:
            yield ops


TRANSPORTS = ["local-openat2", "local-walk", "grpc", "ssh"]


def opened(tmp_path: Path, transport: str) -> contextlib.AbstractAsyncContextManager[Backend]:
    if transport.startswith("local-"):
        return local(tmp_path, transport.removeprefix("local-"))
    return over_grpc(tmp_path) if transport == "grpc" else over_ssh(tmp_path)


def assert_clean(outcomes: Counter[str], allowed: set[str]) -> None:
    unexpected = {k: v for k, v in outcomes.items() if k not in allowed | {"denied"}}
    assert not unexpected, unexpected
    assert outcomes["denied"] > 0, outcomes  # the denied target was really reached
    assert sum(outcomes.values()) >= ITERATIONS, outcomes


# --- the cases -----------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_read_through_a_swapped_link(tmp_path: Path, transport: str) -> None:
    async with opened(tmp_path, transport) as ops:
        root = Path(ops.root)

        async def read() -> str:
            data = await ops.read_file(str(root / "l"))
            return "allowed" if data == ALLOWED else f"LEAK {data!r}"

        with Flipper(root / "l", "ok.txt", ".env") as flipper:
            outcomes = await race(read)
        assert flipper.flips > 0
    assert_clean(outcomes, {"allowed"})


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_write_through_a_swapped_link(tmp_path: Path, transport: str) -> None:
    async with opened(tmp_path, transport) as ops:
        root = Path(ops.root)
        hook = root / ".git" / "hooks" / "pre-commit"
        before = hashlib.sha256(hook.read_bytes()).hexdigest()

        async def write() -> str:
            await ops.write_file(str(root / "w"), b"echo pwned\n")
            return "allowed"

        with Flipper(root / "w", "ok2.txt", ".git/hooks/pre-commit"):
            outcomes = await race(write)
        assert hashlib.sha256(hook.read_bytes()).hexdigest() == before
        assert (root / "ok2.txt").read_bytes() == b"echo pwned\n"
    assert_clean(outcomes, {"allowed"})


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_search_through_a_swapped_link(tmp_path: Path, transport: str) -> None:
    async with opened(tmp_path, transport) as ops:
        root = Path(ops.root)

        async def search() -> str:
            lines = [m.line_text async for m in ops.search("hunter2", str(root / "l"))]
            return "allowed" if not lines else f"LEAK {lines!r}"

        with Flipper(root / "l", "ok.txt", ".env"):
            outcomes = await race(search)
    assert_clean(outcomes, {"allowed"})


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_glob_through_a_swapped_link(tmp_path: Path, transport: str) -> None:
    async with opened(tmp_path, transport) as ops:
        root = Path(ops.root)

        async def glob() -> str:
            names = await ops.glob("*", str(root / "d"))
            return "allowed" if names == ["a.txt"] else f"LEAK {names!r}"

        with Flipper(root / "d", "okdir", ".ssh"):
            outcomes = await race(glob)
    assert_clean(outcomes, {"allowed"})


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_exec_in_a_swapped_cwd(tmp_path: Path, transport: str) -> None:
    """A command's cwd is decided on the directory it runs in: never in the denied one."""
    async with opened(tmp_path, transport) as ops:
        root = Path(ops.root)

        async def run() -> str:
            out = bytearray()
            await ops.exec("pwd -P", str(root / "d"), on_data=out.extend, timeout=30)
            where = bytes(out).strip().rsplit(b"/", 1)[-1]
            return "allowed" if where == b"okdir" else f"LEAK {bytes(out)!r}"

        with Flipper(root / "d", "okdir", ".ssh"):
            outcomes = await race(run)
    assert_clean(outcomes, {"allowed"})
