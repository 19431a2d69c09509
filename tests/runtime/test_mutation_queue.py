"""with_file_mutation_queue: FIFO per file, concurrent across files, aliasing (reference 1.3)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from agent_side import mutation_queue_key, with_file_mutation_queue


def step(log: list[str], name: str, gate: asyncio.Event | None = None, fail: bool = False):  # type: ignore[no-untyped-def]
    async def fn() -> str:
        log.append(f"start:{name}")
        if gate is not None:
            await asyncio.wait_for(gate.wait(), 5)
        else:
            await asyncio.sleep(0)
        log.append(f"end:{name}")
        if fail:
            raise RuntimeError(f"{name} failed")
        return name

    return fn


async def test_same_file_runs_fifo_in_call_order(tmp_path: Path) -> None:
    target = str(tmp_path / "a.txt")
    log: list[str] = []
    gate = asyncio.Event()
    tasks = [asyncio.create_task(with_file_mutation_queue(target, step(log, "1", gate)))]
    tasks += [asyncio.create_task(with_file_mutation_queue(target, step(log, n))) for n in "234"]
    await asyncio.sleep(0.01)
    assert log == ["start:1"]  # the others wait for the first
    gate.set()
    assert await asyncio.gather(*tasks) == ["1", "2", "3", "4"]
    assert log == ["start:1", "end:1", "start:2", "end:2", "start:3", "end:3", "start:4", "end:4"]


async def test_different_files_run_concurrently(tmp_path: Path) -> None:
    log: list[str] = []
    gate = asyncio.Event()
    first = asyncio.create_task(with_file_mutation_queue(str(tmp_path / "a"), step(log, "a", gate)))
    second = asyncio.create_task(with_file_mutation_queue(str(tmp_path / "b"), step(log, "b")))
    await asyncio.wait_for(second, 5)
    assert log == ["start:a", "start:b", "end:b"]
    gate.set()
    await first


async def test_released_on_error_and_error_propagates(tmp_path: Path) -> None:
    target = str(tmp_path / "a")
    log: list[str] = []
    failing = asyncio.create_task(with_file_mutation_queue(target, step(log, "1", fail=True)))
    after = asyncio.create_task(with_file_mutation_queue(target, step(log, "2")))
    with pytest.raises(RuntimeError, match="1 failed"):
        await failing
    assert await after == "2"
    assert log == ["start:1", "end:1", "start:2", "end:2"]


async def test_symlink_aliases_of_an_existing_file_share_a_queue(tmp_path: Path) -> None:
    real = tmp_path / "real.txt"
    real.write_text("x")
    alias = tmp_path / "alias.txt"
    alias.symlink_to(real)
    assert mutation_queue_key(str(alias)) == mutation_queue_key(str(real))
    log: list[str] = []
    gate = asyncio.Event()
    first = asyncio.create_task(with_file_mutation_queue(str(real), step(log, "real", gate)))
    second = asyncio.create_task(with_file_mutation_queue(str(alias), step(log, "alias")))
    await asyncio.sleep(0.01)
    assert log == ["start:real"]
    gate.set()
    await asyncio.gather(first, second)
    assert log == ["start:real", "end:real", "start:alias", "end:alias"]


async def test_relative_and_absolute_spellings_share_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert mutation_queue_key("new.txt") == mutation_queue_key(
        str(tmp_path / "sub" / ".." / "new.txt")
    )


def test_new_file_through_two_directory_aliases_gets_two_keys(tmp_path: Path) -> None:
    real_dir = tmp_path / "dir"
    real_dir.mkdir()
    alias_dir = tmp_path / "link"
    alias_dir.symlink_to(real_dir)
    # the parent resolves, but the file does not exist: the key is the unresolved absolute path
    assert mutation_queue_key(str(alias_dir / "new.txt")) == os.path.abspath(alias_dir / "new.txt")
    assert mutation_queue_key(str(alias_dir / "new.txt")) != mutation_queue_key(
        str(real_dir / "new.txt")
    )


async def test_symlink_loop_rejects_and_fn_never_runs(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    ran: list[bool] = []

    async def fn() -> None:
        ran.append(True)

    with pytest.raises(OSError):
        await with_file_mutation_queue(str(loop), fn)
    assert ran == []
    # a failed registration does not break the chain
    assert await with_file_mutation_queue(str(tmp_path / "ok"), step([], "ok")) == "ok"


async def test_cancelled_waiter_does_not_let_a_successor_overtake(tmp_path: Path) -> None:
    target = str(tmp_path / "a")
    log: list[str] = []
    gate = asyncio.Event()
    first = asyncio.create_task(with_file_mutation_queue(target, step(log, "1", gate)))
    waiting = asyncio.create_task(with_file_mutation_queue(target, step(log, "2")))
    third = asyncio.create_task(with_file_mutation_queue(target, step(log, "3")))
    await asyncio.sleep(0.01)
    waiting.cancel()
    await asyncio.sleep(0.01)
    assert log == ["start:1"]  # 3 still waits for 1
    gate.set()
    await asyncio.gather(first, third)
    assert waiting.cancelled()
    assert log == ["start:1", "end:1", "start:3", "end:3"]


async def test_remote_namespace_keys_by_backend_path(tmp_path: Path) -> None:
    backend_a, backend_b = object(), object()
    log: list[str] = []
    gate = asyncio.Event()
    first = asyncio.create_task(
        with_file_mutation_queue("/w/x.txt", step(log, "a1", gate), namespace=backend_a)
    )
    same = asyncio.create_task(
        with_file_mutation_queue("/w/sub/../x.txt", step(log, "a2"), namespace=backend_a)
    )
    other = asyncio.create_task(
        with_file_mutation_queue("/w/x.txt", step(log, "b1"), namespace=backend_b)
    )
    await asyncio.wait_for(other, 5)
    assert log == ["start:a1", "start:b1", "end:b1"]
    gate.set()
    await asyncio.gather(first, same)
    assert log[-2:] == ["start:a2", "end:a2"]


async def test_remote_resolve_canonicalises_aliases() -> None:
    aliases = {"/w/alias": "/w/real"}

    async def resolve(path: str) -> str:
        await asyncio.sleep(0)
        return aliases.get(path, path)

    log: list[str] = []
    gate = asyncio.Event()
    backend = object()
    first = asyncio.create_task(
        with_file_mutation_queue(
            "/w/real", step(log, "real", gate), namespace=backend, resolve=resolve
        )
    )
    second = asyncio.create_task(
        with_file_mutation_queue("/w/alias", step(log, "alias"), namespace=backend, resolve=resolve)
    )
    await asyncio.sleep(0.01)
    assert log == ["start:real"]
    gate.set()
    await asyncio.gather(first, second)
    assert log == ["start:real", "end:real", "start:alias", "end:alias"]


async def test_unhashable_namespace_keys_by_identity() -> None:
    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

    backend = Unhashable()
    log: list[str] = []
    gate = asyncio.Event()
    first = asyncio.create_task(
        with_file_mutation_queue("/w/x", step(log, "1", gate), namespace=backend)
    )
    second = asyncio.create_task(
        with_file_mutation_queue("/w/x", step(log, "2"), namespace=backend)
    )
    other = asyncio.create_task(
        with_file_mutation_queue("/w/x", step(log, "3"), namespace=Unhashable())
    )
    await asyncio.wait_for(other, 5)
    assert log == ["start:1", "start:3", "end:3"]
    gate.set()
    await asyncio.gather(first, second)
    assert log[-2:] == ["start:2", "end:2"]
