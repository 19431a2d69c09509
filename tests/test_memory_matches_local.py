"""Differential test: the memory backend answers exactly as the broker core on a real disk.

Hypothesis draws small trees (directories, files, relative and absolute symlinks, ``..`` in link
targets) and a path; both backends run the same operation, and the outcome (the error type or
the result, and for mutations the whole tree afterwards) must be identical. Every mismatch is a
bug in one of them: the conformance suite pins what is already known, this looks for the rest.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker import Broker
from operations import InMemoryOperations, OpsError, Symlink
from tests.conformance._workspace import DiskWorkspace

NAMES = ["a", "b", "c"]
TARGET_PARTS = ["a", "b", "c", "..", "."]

name = st.sampled_from(NAMES)
rel_path = st.lists(name, min_size=1, max_size=3).map("/".join)
link_target = st.one_of(
    st.lists(st.sampled_from(TARGET_PARTS), min_size=1, max_size=4).map("/".join),
    st.lists(st.sampled_from(TARGET_PARTS), min_size=1, max_size=3).map(
        lambda p: "/".join(p) + "/"
    ),
    st.lists(name, min_size=0, max_size=2).map(lambda p: "$ABS/" + "/".join(p)),
    st.just("$OUT/secret"),
)
entry = st.one_of(
    st.tuples(st.just("dir"), rel_path, st.just("")),
    st.tuples(st.just("file"), rel_path, st.just("")),
    st.tuples(st.just("link"), rel_path, link_target),
)
query = st.tuples(
    st.lists(st.sampled_from([*NAMES, "..", "."]), min_size=0, max_size=4).map("/".join),
    st.booleans(),
).map(lambda q: q[0] + ("/" if q[1] else ""))

OPERATIONS = [
    "read_file",
    "stat",
    "lstat",
    "exists",
    "readdir",
    "is_directory",
    "write_file",
    "mkdir",
    "remove",
    "remove_recursive",
    "rename_from",
    "rename_to",
    "glob",
    "search",
]


def plan(entries: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """Keep the entries that fit a consistent tree (a parent is a directory, a name used once)."""
    kinds: dict[str, str] = {}
    kept = []
    for kind, path, target in entries:
        parts = path.split("/")
        parents = ["/".join(parts[:i]) for i in range(1, len(parts))]
        if path in kinds or any(kinds.get(p, "dir") != "dir" for p in parents):
            continue
        for parent in parents:
            kinds[parent] = "dir"
        kinds[path] = kind
        kept.append((kind, path, target))
    return kept


def build_disk(root: str, outside: str, entries: list[tuple[str, str, str]]) -> None:
    for kind, path, target in entries:
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        if kind == "dir":
            os.makedirs(full, exist_ok=True)
        elif kind == "file":
            Path(full).write_bytes(path.encode())
        else:
            os.symlink(target.replace("$ABS", root).replace("$OUT", outside), full)


def build_memory(entries: list[tuple[str, str, str]]) -> InMemoryOperations:
    ops = InMemoryOperations(root="/ROOT")
    ops.seed({"/OUTSIDE/secret": b"outside secret", "/OUTSIDE/target": b"outside target"})
    for kind, path, target in entries:
        if kind == "dir":
            ops.seed({path + "/": None})
        elif kind == "file":
            ops.seed({path: path.encode()})
        else:
            ops.seed({path: Symlink(target.replace("$ABS", "/ROOT").replace("$OUT", "/OUTSIDE"))})
    return ops


def disk_tree(top: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for entry_name in dirnames + filenames:
            full = os.path.join(dirpath, entry_name)
            rel = os.path.relpath(full, top)
            if os.path.islink(full):
                out[rel] = ("link", os.readlink(full))
            elif os.path.isdir(full):
                out[rel] = ("dir",)
            else:
                out[rel] = ("file", Path(full).read_bytes())
    return out


def memory_tree(ops: InMemoryOperations, root: str, disk_root: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in ops.snapshot(modes=True).items():
        if isinstance(value, Symlink):
            out[key] = ("link", value.target.replace("/ROOT", disk_root).replace("/OUTSIDE", root))
        elif key.endswith("/"):
            out[key.rstrip("/")] = ("dir",)
        else:
            out[key] = ("file", value.data)  # type: ignore[union-attr]
    return out


async def outcome(ops: Any, root: str, op: str, path: str) -> object:
    full = root + "/" + path if path else root
    try:
        if op == "read_file":
            return await ops.read_file(full)
        if op in ("stat", "lstat"):
            info = await getattr(ops, op)(full)
            return (info.kind, info.size if info.is_file else None)
        if op == "exists":
            return await ops.exists(full)
        if op == "readdir":
            return sorted(await ops.readdir(full))
        if op == "is_directory":
            return await ops.is_directory(full)
        if op == "write_file":
            return await ops.write_file(full, b"written")
        if op == "mkdir":
            return await ops.mkdir(full)
        if op == "remove":
            return await ops.remove(full)
        if op == "remove_recursive":
            return await ops.remove(full, recursive=True)
        if op == "rename_from":
            return await ops.rename(full, root + "/moved")
        if op == "glob":
            return await ops.glob("*", full)
        if op == "search":
            found = [m async for m in ops.search("[abc]", full)]
            return [(m.path.removeprefix(root), m.line_number, m.line_text) for m in found]
        if op == "rename_to":
            await ops.write_file(root + "/source", b"source")
            return await ops.rename(root + "/source", full)
    except OpsError as error:
        return type(error).__name__
    raise AssertionError(op)


async def compare(entries: list[tuple[str, str, str]], path: str, op: str) -> None:
    with tempfile.TemporaryDirectory(prefix="opsbroker-diff-") as tmp:
        root, outside = DiskWorkspace.create_dirs(Path(tmp))
        build_disk(root, outside, entries)
        memory = build_memory(entries)
        async with Broker(root) as broker:
            on_disk = await outcome(broker, root, op, path)
        in_memory = await outcome(memory, "/ROOT", op, path)
        assert in_memory == on_disk, f"{op} {path!r} on {entries}"
        assert memory_tree(memory, outside, root) == disk_tree(root), f"{op} {path!r} on {entries}"
        assert disk_tree(outside) == {
            "secret": ("file", b"outside secret"),
            "target": ("file", b"outside target"),
        }


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
    derandomize=True,  # the same examples on every run: CI is not the place to draw new ones
)
@given(
    entries=st.lists(entry, min_size=0, max_size=6).map(plan),
    path=query,
    op=st.sampled_from(OPERATIONS),
)
def test_memory_matches_local(entries: list[tuple[str, str, str]], path: str, op: str) -> None:
    asyncio.run(compare(entries, path, op))
