"""The two search engines of the broker agree, and the ``rg`` one is really kept inside.

``rg`` runs under a Landlock ruleset (``broker._rg``); the fd-based Python walk
(``broker._treewalk``) is the fallback. Where this kernel has no Landlock the rg tests check only
that the broker does not pick rg, and say so.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from broker import Broker, _rg
from broker._rg import _Rg, _ruleset, rg_path, usable

PATTERNS = [
    ("needle", {}),
    ("^start", {}),
    ("end$", {}),
    (r"\bword\b", {}),
    (r"n[ae]+dle\d*", {}),
    ("NEEDLE", {"ignore_case": True}),
    ("a.b(c", {"literal": True}),
    ("(?<=pre)fix", {}),  # look-behind: rg refuses it, the broker falls back to the walk
    (r"caf\u00e9", {}),
]


def make_tree(root: Path) -> None:
    (root / "src" / "deep").mkdir(parents=True)
    (root / ".hidden").mkdir()
    (root / "ignored").mkdir()
    (root / ".gitignore").write_text("ignored/\n*.log\n")
    (root / "a.txt").write_text("needle one\nstart here\nthe end\nword words\n")
    (root / "src" / "b.py").write_text("x = 1\r\nneedle2 = 'NeEdLe'\r\nend\r\n")
    (root / "src" / "deep" / "c.md").write_text("a.b(c literal\nprefix and fix\ncafé\n")
    (root / ".hidden" / "h.txt").write_text("needle hidden\n")
    (root / "ignored" / "i.txt").write_text("needle ignored\n")
    (root / "x.log").write_text("needle log\n")
    (root / "bin.dat").write_bytes(b"needle\0binary\n")
    (root / "link.txt").symlink_to("a.txt")
    (root / "naedle3").write_text("naaedle3 start\n")


@pytest.mark.parametrize(("pattern", "options"), PATTERNS, ids=[p for p, _ in PATTERNS])
@pytest.mark.parametrize("glob", [None, "*.py", "!*.txt"])
async def test_engines_agree(
    tmp_path: Path, pattern: str, options: dict[str, bool], glob: str | None
) -> None:
    root = tmp_path / "ROOT"
    root.mkdir()
    make_tree(root)
    results = {}
    for engine in ("rg", "python"):
        if engine == "rg" and not usable():
            continue
        async with Broker(str(root), search_engine=engine) as broker:
            results[engine] = [
                m async for m in broker.search(pattern, str(root), glob=glob, limit=50, **options)
            ]
    if glob is None:
        assert results["python"], "the tree has matches for every pattern"
    if "rg" in results:
        assert results["rg"] == results["python"]


@pytest.mark.parametrize("engine", ["rg", "python"])
async def test_a_nul_in_the_pattern_is_searched_not_an_error(tmp_path: Path, engine: str) -> None:
    """rg takes its pattern in argv, which cannot carry a NUL: such a pattern takes the walk."""
    root = tmp_path / "ROOT"
    root.mkdir()
    make_tree(root)
    async with Broker(str(root), search_engine=engine) as broker:
        assert [m async for m in broker.search("\0", str(root), limit=50)] == []
        assert [m async for m in broker.search("a\0b", str(root), literal=True, limit=5)] == []


async def test_limit_stops_early(tmp_path: Path) -> None:
    root = tmp_path / "ROOT"
    root.mkdir()
    for i in range(50):
        (root / f"f{i:02d}.txt").write_text("needle\n" * 10)
    async with Broker(str(root)) as broker:
        found = [m async for m in broker.search("needle", str(root), limit=7)]
    assert [(Path(m.path).name, m.line_number) for m in found] == [
        ("f00.txt", n) for n in range(1, 8)
    ]


def test_rg_cannot_read_outside_its_directory(tmp_path: Path) -> None:
    """Without the broker's checks in the way: rg under the ruleset, aimed at an outside file."""
    rg = rg_path()
    if not usable() or rg is None:
        return  # no Landlock or no rg here: the broker never starts rg (test_engine_choice)
    inside = tmp_path / "ROOT"
    inside.mkdir()
    (inside / "in.txt").write_text("needle inside\n")
    (tmp_path / "secret.txt").write_text("needle outside\n")
    fd = os.open(inside, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        ruleset = _ruleset(fd, rg)
        try:
            for target in (str(tmp_path / "secret.txt"), "../secret.txt", "/etc/hostname"):
                run = subprocess.run(
                    [rg, "--no-config", "needle|localhost|.", target],
                    cwd=f"/proc/self/fd/{fd}",
                    preexec_fn=ruleset.preexec,
                    capture_output=True,
                    check=False,
                )
                assert run.stdout == b"", run.stdout
                assert run.returncode == 2
            run = subprocess.run(
                [rg, "--no-config", "needle", "in.txt"],
                cwd=f"/proc/self/fd/{fd}",
                preexec_fn=ruleset.preexec,
                capture_output=True,
                check=False,
            )
            assert run.stdout == b"needle inside\n"
        finally:
            ruleset.close()
    finally:
        os.close(fd)


async def test_engine_choice(tmp_path: Path) -> None:
    async with Broker(str(tmp_path), search_engine="auto") as broker:
        assert broker.capabilities()["search"] == ("rg" if usable() else "python")
    async with Broker(str(tmp_path), search_engine="python") as broker:
        assert broker.capabilities()["search"] == "python"


def _open_fds() -> dict[str, str]:
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own fd, closed already
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
    return found


@pytest.mark.parametrize("engine", ["rg", "python"])
async def test_cancelled_walks_leave_no_fd_behind(tmp_path: Path, engine: str) -> None:
    """Cancelling glob or search mid-walk stops it, closes every fd, and the broker goes on."""
    root = tmp_path / "ROOT"
    for i in range(300):
        (root / f"d{i % 30}").mkdir(parents=True, exist_ok=True)
        (root / f"d{i % 30}" / f"f{i}.txt").write_text("needle\n" * 20)
    async with Broker(str(root), search_engine=engine) as broker:
        await broker.glob("**", str(root))
        before = _open_fds()
        for delay in (0.0, 0.001, 0.005, 0.02):
            with anyio.move_on_after(delay):
                await broker.glob("**/*.txt", str(root))
            with anyio.move_on_after(delay):
                async for _ in broker.search("needle", str(root), limit=100_000):
                    pass
        for _ in range(250):  # threads finish their current step, then release the fds
            if _open_fds().items() <= before.items():
                break
            await anyio.sleep(0.02)
        new = {fd: what for fd, what in _open_fds().items() if before.get(fd) != what}
        assert not new, f"left open: {new}"
        assert len(await broker.glob("*.txt", str(root))) == 300


async def test_an_interrupted_wait_leaves_one_reaping() -> None:
    """A wait for rg cancelled midway (a search cancelled while rg exits) and the close after it
    reap rg once, through its pidfd: a second ``waitpid`` would fail with ECHILD, or reap
    another child that took the pid."""
    pid = os.posix_spawn("/bin/sh", ["sh", "-c", "sleep 0.2"], {})  # noqa: ASYNC221 (a bare pid)
    proc = _Rg(pid, os.pidfd_open(pid))
    for _ in range(3):
        with anyio.move_on_after(0.02):
            await proc.wait()
    proc.close()  # kills rg (it still runs)
    await proc.wait()  # the same reaping
    assert await proc.wait() == -9
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222 (reaped once, by the pidfd callback)


def make_wide_tree(root: Path) -> None:
    """Enough directories, at the top and in ``d2``, that a search runs several rg workers, with
    what an explicit path would let rg get wrong: ignored and ``.git`` directories, links, ignore
    files at several levels, names that sort between each other. 80 matches, 10 in ``d2``."""
    for i in range(8):
        for j in range(8):
            (root / f"d{i}" / f"s{j}").mkdir(parents=True)
            (root / f"d{i}" / f"s{j}" / "b.txt").write_text(f"x\nneedle d{i} s{j}\r\n")
        (root / f"d{i}" / "a.txt").write_text(f"needle d{i} a\nnothing\n")
    (root / ".gitignore").write_text("ignored/\n*.log\n!keep.log\nskip/\n")
    (root / "d1" / ".gitignore").write_text("local.txt\n")
    (root / "d1" / "local.txt").write_text("needle local\n")
    (root / "d2" / "s0" / "keep.log").write_text("needle kept log\n")
    (root / "d2" / "x.log").write_text("needle log\n")
    (root / "d3" / "skip").mkdir()
    (root / "d3" / "skip" / "s.txt").write_text("needle skipped\n")
    (root / "ignored").mkdir()
    (root / "ignored" / "i.txt").write_text("needle ignored\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("needle git\n")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "h.txt").write_text("needle hidden\n")
    for name in ("a", "a.txt", "a-b", "a_b", "B", "\u00e9t\u00e9"):
        (root / name).write_text(f"needle {name}\n")
    (root / "dir-link").symlink_to("d0")
    (root / "d2" / "file-link.txt").symlink_to("a.txt")
    (root / "bin.dat").write_bytes(b"needle\0binary\n")


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many rg processes each search started (four CPUs, whatever this machine has)."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    counts: list[int] = []
    real_start = _rg._start

    async def start(*args: Any) -> _Rg:
        counts[-1] += 1
        return await real_start(*args)

    real_take = _rg._take_workers

    def take() -> int:  # once per search
        counts.append(0)
        return real_take()

    monkeypatch.setattr(_rg, "_start", start)
    monkeypatch.setattr(_rg, "_take_workers", take)
    return counts


@pytest.mark.parametrize("where", ["", "d2"])
@pytest.mark.parametrize("limit", [1000, 9])
async def test_workers_side_by_side_find_what_one_finds_in_order(
    tmp_path: Path, starts: list[int], monkeypatch: pytest.MonkeyPatch, where: str, limit: int
) -> None:
    """Several rg workers over runs of the entries find exactly what one rg and the Python walk
    find, in the same order: nothing an explicit path would let in (ignored, ``.git``, links)."""
    if not usable():
        return  # the broker never starts rg here (test_engine_choice)
    root = tmp_path / "ROOT"
    root.mkdir()
    make_wide_tree(root)
    path = str(root / where) if where else str(root)
    results = {}
    many = _rg.MAX_WORKERS
    for engine, workers in (("rg", many), ("rg", 1), ("python", 0)):
        monkeypatch.setattr(_rg, "MAX_WORKERS", workers)
        async with Broker(str(root), search_engine=engine) as broker:
            found = [m async for m in broker.search("needle", path, limit=limit)]
        results[engine, workers] = [(m.path, m.line_number, m.line_text) for m in found]
    assert starts == [4, 1], "four workers, then one"
    expected = results["python", 0]
    assert results["rg", 1] == expected
    assert results["rg", many] == expected
    texts = [text for _, _, text in expected]
    assert len(texts) == min(limit, 10 if where else 80), texts
    for hidden in ("ignored", "git", "local", "skipped", "needle log", "binary"):
        assert not any(hidden in (text or "") for text in texts), (hidden, texts)


async def test_a_reached_limit_stops_every_worker(tmp_path: Path, starts: list[int]) -> None:
    """Workers whose turn has not come wait on full pipes; a reached limit kills and reaps them
    all, and the search returns at once."""
    if not usable():
        return
    root = tmp_path / "ROOT"
    for i in range(8):
        (root / f"d{i}").mkdir(parents=True)
        (root / f"d{i}" / "many.txt").write_text(f"needle {i}\n" * 200_000)
    children = _children()
    async with Broker(str(root)) as broker:
        with anyio.fail_after(20):
            found = [m async for m in broker.search("needle", str(root), limit=3)]
    assert [(Path(m.path).parent.name, m.line_number) for m in found] == [
        ("d0", n) for n in (1, 2, 3)
    ]
    assert starts == [4]
    assert _children() == children, "an rg worker was left running or unreaped"


def _children() -> set[str]:
    found: set[str] = set()
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/children") as f:
            found.update(f.read().split())
    return found


async def test_searches_at_once_share_the_cpus(tmp_path: Path, starts: list[int]) -> None:
    """A search takes the CPUs no other search's workers hold: with all four held by one
    search, another runs one rg, and once the first ends the next takes four again."""
    if not usable():
        return
    root = tmp_path / "ROOT"
    root.mkdir()
    make_wide_tree(root)
    async with Broker(str(root)) as broker:
        first = broker.search("needle", str(root), limit=1000)
        assert await first.__anext__()  # its workers run, held
        during = [m async for m in broker.search("needle", str(root), limit=1000)]
        await first.aclose()
        after = [m async for m in broker.search("needle", str(root), limit=1000)]
    assert starts == [4, 1, 4]
    assert during == after
    assert _rg._held == [0], "a search kept its workers"
