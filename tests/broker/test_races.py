"""Symlink-swap and rename races against the broker's confinement, on both resolvers.

Each test runs an attacker thread that flips part of the tree (a file for a symlink to the decoy
outside the root, a directory for a link to it, a directory renamed mid-walk) while the broker
repeats an operation :data:`ITERATIONS` times. Whatever the interleaving, the broker may fail or
act on something inside the root, but it never returns outside content and the decoy's hash is
unchanged. Each test is bounded by :data:`DEADLINE_S`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from broker import Broker, _rg
from operations import OpsError
from tests.conformance._workspace import tree_digest

ITERATIONS = 1000  # per test; the issue asks for >= 1000 in CI
DEADLINE_S = 120.0  # a hung attacker or broker fails the test instead of the CI run
SECRET = b"outside secret"


@pytest.fixture(params=["openat2", "walk"])
async def broker(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Broker]:
    root = tmp_path / "ROOT"
    outside = tmp_path / "OUTSIDE"
    root.mkdir()
    outside.mkdir()
    (outside / "secret").write_bytes(SECRET)
    (outside / "sub").mkdir()
    (outside / "out.txt").write_bytes(b"needle outside\n")
    before = tree_digest(str(outside))
    async with Broker(str(root), resolver=request.param) as b:
        yield b
    assert tree_digest(str(outside)) == before, "the decoy outside the root changed"


@contextmanager
def attacker(flip: Callable[[], None]) -> Iterator[list[int]]:
    """Run ``flip`` in a loop in a thread until the block ends; yields a one-item flip counter."""
    stop = threading.Event()
    count = [0]
    errors: list[BaseException] = []

    def run() -> None:
        try:
            while not stop.is_set():
                flip()
                count[0] += 1
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield count
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not errors, errors
    assert count[0] > 0, "the attacker never ran"


def swap_file_and_link(path: Path, link_target: str) -> Callable[[], None]:
    """Alternately put a regular file and a symlink to ``link_target`` at ``path``, atomically."""
    tmp_file = path.with_name(path.name + ".file")
    tmp_link = path.with_name(path.name + ".link")

    def flip() -> None:
        tmp_file.write_bytes(b"inside")
        os.replace(tmp_file, path)
        os.symlink(link_target, tmp_link)
        os.replace(tmp_link, path)

    return flip


def swap_dir_and_link(path: Path, link_target: str) -> Callable[[], None]:
    """Alternately put a real directory and a symlink to ``link_target`` at ``path``.

    To restore the directory, whatever sits at ``path`` (the link, or what the broker created
    there meanwhile, as mkdir does) is renamed aside, outside the root, and the saved directory
    renamed back: one rename each, so a busy broker cannot keep the attacker out.
    """
    saved = path.with_name(path.name + ".saved")
    trash = path.parent.parent / "TRASH"
    trash.mkdir(exist_ok=True)
    moved = [0]

    def flip() -> None:
        os.rename(path, saved)
        with contextlib.suppress(FileExistsError):
            os.symlink(link_target, path)
        for _ in range(10_000):
            moved[0] += 1
            with contextlib.suppress(FileNotFoundError):
                os.rename(path, trash / str(moved[0]))
            try:
                os.rename(saved, path)
            except OSError:  # the broker made `path` again between the two renames
                continue
            return
        raise AssertionError("could not restore the directory")

    return flip


@pytest.mark.parametrize("target", ["ABS", "../OUTSIDE/secret"])
async def test_read_while_file_swapped_for_link(broker: Broker, target: str) -> None:
    root = Path(broker.root)
    link_target = str(root.parent / "OUTSIDE" / "secret") if target == "ABS" else target
    (root / "f").write_bytes(b"inside")
    seen = {"ok": 0, "error": 0}
    with anyio.fail_after(DEADLINE_S), attacker(swap_file_and_link(root / "f", link_target)):
        for _ in range(ITERATIONS):
            try:
                data = await broker.read_file(f"{broker.root}/f")
            except OpsError:
                seen["error"] += 1
                continue
            assert data == b"inside", f"read returned {data!r}"
            seen["ok"] += 1
    assert seen["ok"] + seen["error"] == ITERATIONS


@pytest.mark.parametrize("target", ["ABS", "../OUTSIDE/secret", "../OUTSIDE/created"])
async def test_write_while_file_swapped_for_link(broker: Broker, target: str) -> None:
    root = Path(broker.root)
    outside = root.parent / "OUTSIDE"
    link_target = str(outside / "secret") if target == "ABS" else target
    (root / "f").write_bytes(b"inside")
    with anyio.fail_after(DEADLINE_S), attacker(swap_file_and_link(root / "f", link_target)):
        for i in range(ITERATIONS):
            try:
                await broker.write_file(f"{broker.root}/f", f"write {i}")
            except OpsError:
                continue
    assert (outside / "secret").read_bytes() == SECRET
    assert not (outside / "created").exists()


async def test_readdir_while_dir_swapped_for_link(broker: Broker) -> None:
    root = Path(broker.root)
    (root / "d").mkdir()
    (root / "d" / "inside").write_bytes(b"x")
    flip = swap_dir_and_link(root / "d", "../OUTSIDE")
    with anyio.fail_after(DEADLINE_S), attacker(flip):
        for _ in range(ITERATIONS):
            try:
                names = await broker.readdir(f"{broker.root}/d")
                entries = await broker.list_dir(f"{broker.root}/d/")
            except OpsError:
                continue
            assert names == ["inside"], names
            assert [e.name for e in entries] == ["inside"], entries


async def test_mkdir_parents_while_dir_swapped_for_link(broker: Broker) -> None:
    root = Path(broker.root)
    (root / "d").mkdir()
    flip = swap_dir_and_link(root / "d", "../OUTSIDE/sub")
    with anyio.fail_after(DEADLINE_S), attacker(flip):
        for i in range(ITERATIONS):
            try:
                await broker.mkdir(f"{broker.root}/d/n{i % 7}/x/y")
            except OpsError:
                continue
    assert os.listdir(root.parent / "OUTSIDE" / "sub") == []


async def test_read_while_dir_renamed_mid_walk(broker: Broker) -> None:
    """Go's TestRootRaceRenameDir: ``a/a/a/a/../../../../a/f`` while ``a`` is renamed."""
    root = Path(broker.root)
    (root / "a" / "a" / "a" / "a").mkdir(parents=True)
    (root / "a" / "f").write_bytes(b"public")
    (root.parent / "f").write_bytes(b"secret")  # where four '..' from a moved dir would land

    def flip() -> None:
        os.rename(root / "a", root / "b")
        os.rename(root / "b", root / "a")

    path = f"{broker.root}/a/a/a/a/../../../../a/f"
    with anyio.fail_after(DEADLINE_S), attacker(flip):
        for _ in range(ITERATIONS):
            try:
                data = await broker.read_file(path)
            except OpsError:
                continue
            assert data == b"public", f"read returned {data!r}"


async def test_glob_and_search_while_dir_swapped_for_link(broker: Broker) -> None:
    root = Path(broker.root)
    (root / "d").mkdir()
    (root / "d" / "inside.txt").write_bytes(b"needle inside\n")
    flip = swap_dir_and_link(root / "d", "../OUTSIDE")
    rounds = ITERATIONS // 10  # each round is a whole tree walk (and an rg process)
    with anyio.fail_after(DEADLINE_S), attacker(flip):
        for _ in range(rounds):
            try:
                found = await broker.glob("**", broker.root)
                matches = [m async for m in broker.search("needle", broker.root)]
            except OpsError:
                continue
            assert all("out.txt" not in p and "secret" not in p for p in found), found
            assert all(m.line_text == "needle inside" for m in matches), matches


@pytest.mark.parametrize("target", ["../OUTSIDE", "d0"])
async def test_search_by_several_workers_while_dir_swapped_for_link(
    broker: Broker, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    """The broker names a directory on rg's command line after listing it as one; swapped for a
    link meanwhile, rg would follow it. Landlock keeps rg inside the search directory and the
    recheck drops every file reached through a link: no outside content, ever."""
    root = Path(broker.root)
    for i in range(8):
        (root / f"d{i}").mkdir()
        (root / f"d{i}" / "inside.txt").write_bytes(b"needle inside\n")
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    splits = []
    real_runs = _rg._runs

    def runs(*args: Any) -> list[list[str]] | None:
        found = real_runs(*args)
        splits.append(found is not None)
        return found

    monkeypatch.setattr(_rg, "_runs", runs)
    rounds = ITERATIONS // 10  # each round starts four rg processes
    with anyio.fail_after(DEADLINE_S), attacker(swap_dir_and_link(root / "d3", target)):
        for _ in range(rounds):
            try:
                matches = [m async for m in broker.search("needle", broker.root)]
            except OpsError:
                continue
            assert all(m.line_text == "needle inside" for m in matches), matches
            assert all(Path(m.path).parent.parent == root for m in matches), matches
    if broker.capabilities()["search"] == "rg":
        assert any(splits), "no search ran several workers"
