"""A pytest plugin: record a session against a live backend once, replay it afterwards.

In the style of pytest-recording. A test marked with the live backend it records against takes
the ``cassette_ops`` fixture::

    @pytest.mark.cassette("local:/srv/fixture-repo")
    async def test_agent_fixes_the_bug(cassette_ops):
        ... run the agent's tools against cassette_ops ...

On the first run (no cassette yet) ``cassette_ops`` is the live backend, recorded to
``cassettes/<module>/<test>.cassette`` beside the test file; afterwards it is
``InMemoryOperations.from_cassette`` of that file, and the test fails at teardown if the replay
met a call the cassette could not answer. ``--record-mode``:

- ``once`` (default): record when the cassette is missing, else replay;
- ``rewrite``: record again, replacing the cassette;
- ``none``: replay only (CI): a missing cassette is an error;
- ``new_episodes``: replay, running commands the cassette lacks live and appending them.

Enabled by the tests that want it (``pytest_plugins = ["agent_side.pytest_cassette"]`` in a
``conftest.py``, or ``pytest -p agent_side.pytest_cassette``), not as a ``pytest11`` entry point:
pytest would then load it in every project that installs opsbroker and rewrite the asserts of all
of opsbroker's packages. It lives in ``agent_side``,
beside :func:`~agent_side.connect`, which picks the live backend (``operations`` imports neither).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from operations import Backend, ReplayOperations

from ._connect import connect

__all__ = ["cassette_ops", "cassette_path"]

RECORD_MODES = ("once", "rewrite", "none", "new_episodes")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("opsbroker").addoption(
        "--record-mode",
        choices=RECORD_MODES,
        default="once",
        help="cassettes: record when missing (once), always (rewrite), never (none), "
        "or add commands the cassette lacks (new_episodes)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cassette(url): record against the backend at url once, then replay"
    )


@pytest.fixture
def cassette_path(request: pytest.FixtureRequest) -> Path:
    """Where this test's cassette lives: ``cassettes/<module>/<test>.cassette``."""
    module = Path(str(request.node.path))
    name = request.node.name.replace("/", "_")
    return module.parent / "cassettes" / module.stem / f"{name}.cassette"


def _exists(path: Path) -> bool:
    return path.exists()  # once, before the test: not worth a thread


@pytest.fixture
async def cassette_ops(
    request: pytest.FixtureRequest, cassette_path: Path
) -> AsyncIterator[Backend]:
    """The live backend of the ``cassette`` mark, recorded; or the replay of its cassette."""
    marker = request.node.get_closest_marker("cassette")
    if marker is None or not marker.args:
        raise pytest.UsageError(
            f"{request.node.nodeid}: cassette_ops needs @pytest.mark.cassette(URL), the live "
            "backend to record against"
        )
    url = str(marker.args[0])
    options: dict[str, Any] = dict(marker.kwargs)
    mode = request.config.getoption("--record-mode")
    exists = _exists(cassette_path)
    if mode == "rewrite" or (mode == "once" and not exists):
        recorder = connect(url, record=cassette_path, **options)
        async with recorder:
            yield recorder
        return
    if not exists:
        pytest.fail(
            f"cassette {str(cassette_path)!r} does not exist and --record-mode={mode} does not "
            "record: run once with --record-mode=once (or rewrite) against the live backend"
        )
    live = connect(url, **options) if mode == "new_episodes" else None
    replay = ReplayOperations(
        cassette_path, mode="new_episodes" if live is not None else "once", live=live
    )
    async with replay:
        yield replay
    if replay.mismatches:
        pytest.fail(
            f"{len(replay.mismatches)} call(s) not in the cassette: {replay.mismatches[0]}"
            " (re-record with --record-mode=rewrite)"
        )
