"""Where a shell tool keeps a command's full output: a file the model can ``read``, bounded.

The reference writes ``/tmp/pi-bash-<hex>.log`` on the agent's machine and never deletes it. On a
remote backend that path is out of reach (``read`` refuses it as an escape) and the files pile up.
Here, once a command ends with truncated output, its spill file is copied through the backend's
own ``write_file`` into :data:`OUTPUT_DIR` under the workspace root, where ``read`` of the path in
the notice works on every backend the policy lets write there; the local spill is then deleted.
The directory is pruned after each save to :data:`MAX_FILES` files, :data:`MAX_TOTAL_BYTES` and
:data:`MAX_AGE_S`, newest kept. When the backend cannot take the file (no root, read-only, a
policy refusal), the local spill stays and the notice names it, as the reference does; the local
spills are then pruned by the same limits.
"""

from __future__ import annotations

import contextlib
import glob
import os
import posixpath
import time
from typing import Any

from operations import OpsError

__all__ = [
    "MAX_AGE_S",
    "MAX_FILES",
    "MAX_FILE_BYTES",
    "MAX_TOTAL_BYTES",
    "OUTPUT_DIR",
    "keep_full_output",
]

OUTPUT_DIR = ".opsbroker/outputs"
"""Root-relative; hidden, so it stays out of a casual ``ls``, and not a secret, so ``read`` works."""
MAX_FILES = 20  # the outputs of the last commands a model may still look back at
MAX_FILE_BYTES = 8 * 1024 * 1024  # the tail of a larger output is kept (the end shows the error)
MAX_TOTAL_BYTES = 64 * 1024 * 1024  # a workspace is not a log store
MAX_AGE_S = 24 * 3600.0  # older than a working day: from a session long over


async def keep_full_output(ops: Any, root: str | None, local_path: str) -> str:
    """Save the spill file ``local_path`` under ``root`` through ``ops``; return the path to name.

    Returns the backend path of the saved copy, or ``local_path`` when the backend could not
    take it. Never raises for a failed save: the command's result matters more than its copy.
    """
    target = None
    if root is not None and callable(getattr(ops, "write_file", None)):
        directory = posixpath.join(root, OUTPUT_DIR)
        target = posixpath.join(directory, os.path.basename(local_path))
        try:
            data = _tail_of(local_path)
            await ops.mkdir(directory)
            await ops.write_file(target, data)
        except (OpsError, OSError):
            target = None
        else:
            with contextlib.suppress(OSError):
                os.unlink(local_path)
            await _prune_backend(ops, directory, keep=posixpath.basename(target))
    if target is None:
        _prune_local(local_path)
        return local_path
    return target


def _tail_of(path: str) -> bytes:
    """The last :data:`MAX_FILE_BYTES` of the file ``path`` (all of it, usually)."""
    with open(path, "rb") as spill:
        size = os.fstat(spill.fileno()).st_size
        spill.seek(max(0, size - MAX_FILE_BYTES))
        return spill.read()


def _keep(entries: list[tuple[str, float, int]], now: float) -> set[str]:
    """The names to keep of ``(name, mtime, size)``: the newest, within every limit."""
    kept: set[str] = set()
    total = 0
    for name, mtime, size in sorted(entries, key=lambda e: e[1], reverse=True):
        if len(kept) >= MAX_FILES or total + size > MAX_TOTAL_BYTES or now - mtime > MAX_AGE_S:
            continue
        kept.add(name)
        total += size
    return kept


async def _prune_backend(ops: Any, directory: str, *, keep: str) -> None:
    """Remove the saved outputs in ``directory`` beyond the limits, never ``keep`` (best effort)."""
    if not callable(getattr(ops, "remove", None)):
        return
    try:
        entries = []
        for name in await ops.readdir(directory):
            info = await ops.stat(posixpath.join(directory, name))
            entries.append((name, info.mtime, info.size))
        now = time.time()
        for name in {e[0] for e in entries} - _keep(entries, now) - {keep}:
            await ops.remove(posixpath.join(directory, name))
    except OpsError:
        return


def _prune_local(path: str) -> None:
    """Remove this tool's local spill files beside ``path`` beyond the limits (best effort)."""
    prefix = os.path.basename(path).rsplit("-", 1)[0]
    entries = []
    for candidate in glob.glob(os.path.join(glob.escape(os.path.dirname(path)), f"{prefix}-*.log")):
        with contextlib.suppress(OSError):
            info = os.stat(candidate)
            entries.append((candidate, info.st_mtime, info.st_size))
    for candidate in {e[0] for e in entries} - _keep(entries, time.time()) - {path}:
        with contextlib.suppress(OSError):
            os.unlink(candidate)
