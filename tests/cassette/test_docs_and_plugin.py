"""The docs' "record once, replay in CI" example runs as written; the pytest plugin records on the
first run and replays afterwards."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

DOCS = Path(__file__).parents[2] / "docs" / "memory-backend.md"


def _example() -> str:
    text = DOCS.read_text()
    found = re.search(r"<!-- example: record-replay -->\n```python\n(.*?)```", text, re.S)
    assert found is not None, "the record-replay example is missing from docs/memory-backend.md"
    return found.group(1)


async def test_the_docs_example_runs(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "app.py").write_text("print('app')\n")
    body = textwrap.indent(_example(), "    ")
    source = f"async def example(workspace):\n{body}\n    return recorded\n"
    ast.parse(source)
    namespace: dict[str, object] = {}
    cwd = os.getcwd()
    os.chdir(tmp_path)  # the example writes session.cassette where it runs
    try:
        exec(compile(source, str(DOCS), "exec"), namespace)
        recorded = await namespace["example"](workspace)  # type: ignore[operator]
    finally:
        os.chdir(cwd)
    assert recorded[0].strip() == "42"
    assert recorded[1] == "print('app')\n"
    assert (tmp_path / "session.cassette").read_text().startswith('{"opsbroker_cassette": 1')


CONFTEST = 'pytest_plugins = ["agent_side.pytest_cassette"]\n'

PLUGIN_TEST = """
import pytest

@pytest.fixture
def anyio_backend():
    return "asyncio"

@pytest.mark.anyio
@pytest.mark.cassette("local:{root}")
async def test_session(cassette_ops):
    out = []
    await cassette_ops.exec("cat counter.txt", cassette_ops.root, on_data=out.append)
    assert out == [b"1\\n"]
"""


def _pytest(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_plugin_records_once_then_replays(tmp_path: Path) -> None:
    root = tmp_path / "live"
    root.mkdir()
    (root / "counter.txt").write_text("1\n")
    tests = tmp_path / "suite"
    tests.mkdir()
    (tests / "conftest.py").write_text(CONFTEST)
    (tests / "test_it.py").write_text(PLUGIN_TEST.format(root=root))
    cassette = tests / "cassettes" / "test_it" / "test_session.cassette"

    missing = _pytest(tests, "--record-mode=none")
    assert missing.returncode != 0  # nothing to replay yet
    assert "cassette" in missing.stdout + missing.stderr and "unrecognized" not in missing.stderr
    first = _pytest(tests)
    assert first.returncode == 0, first.stdout + first.stderr
    assert cassette.exists()
    (root / "counter.txt").write_text("2\n")  # the live workspace moves on; the replay does not
    replayed = _pytest(tests, "--record-mode=none")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    rewritten = _pytest(tests, "--record-mode=rewrite")
    assert rewritten.returncode != 0  # recorded again, live: the test sees "2"
    assert '"2\\n"' in cassette.read_text()
