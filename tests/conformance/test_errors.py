"""Errors on every backend: malformed requests, error shape, and a closed backend."""

from __future__ import annotations

import pytest

from operations import (
    ERROR_TYPES,
    EscapesRoot,
    InvalidArgument,
    NotFound,
    OpsError,
    Unavailable,
)
from tests.conformance import _commands as cmd
from tests.conformance._workspace import Workspace


@pytest.mark.parametrize(
    "rel",
    [None, "relative/path", "f\0x", "a" * 256, "/".join(["d" * 200] * 21), "f/\0"],
    ids=["empty", "relative", "nul-byte", "name-too-long", "path-too-long", "nul-after-slash"],
)
async def test_malformed_paths(ws: Workspace, rel: str | None) -> None:
    """Paths are absolute, under the root, without NUL bytes, within NAME_MAX and PATH_MAX."""
    if rel is None:
        path = ""
    elif rel.startswith("relative"):
        path = rel
    else:
        path = ws.path(rel)
    ws.make(["f", "relative/path"])
    with pytest.raises(InvalidArgument):
        await ws.ops.read_file(path)
    with pytest.raises(InvalidArgument):
        await ws.ops.write_file(path, b"x")
    with pytest.raises(InvalidArgument):
        await ws.ops.stat(path)
    with pytest.raises(InvalidArgument):
        await ws.ops.exists(path)
    assert ws.read_raw("f") == b"f"
    assert ws.read_raw("relative/path") == b"path"


async def test_longest_name_is_fine(ws: Workspace) -> None:
    name = "a" * 255
    await ws.ops.write_file(ws.path(name), b"x")
    assert ws.read_raw(name) == b"x"


async def test_error_carries_op_path_and_code(ws: Workspace) -> None:
    path = ws.path("missing")
    with pytest.raises(NotFound) as caught:
        await ws.ops.read_file(path)
    error = caught.value
    assert (error.op, error.path, error.code) == ("read_file", path, "not_found")
    assert path in str(error)
    assert ERROR_TYPES[error.code] is NotFound


async def test_path_outside_is_escape_not_not_found(ws: Workspace) -> None:
    with pytest.raises(EscapesRoot) as caught:
        await ws.ops.read_file(ws.outside + "/does-not-exist")
    assert caught.value.code == "escapes_root"


async def test_closed_backend_is_unavailable(ws: Workspace) -> None:
    ws.make(["f"])
    await ws.ops.aclose()
    await ws.ops.aclose()
    with pytest.raises(Unavailable):
        await ws.ops.read_file(ws.path("f"))
    with pytest.raises(Unavailable):
        await ws.ops.exec(cmd.ECHO_HI, ws.root, on_data=lambda _: None)
    with pytest.raises(OpsError):
        await ws.ops.write_file(ws.path("g"), b"x")
    assert not ws.exists_raw("g")
