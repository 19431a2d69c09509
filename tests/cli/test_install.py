"""An install of this project searches with ripgrep: the ``ripgrep`` wheel is a dependency, at a
version that ships binary wheels (14.x; 15.x is source-only and would need a Rust build), and the
broker of the installed environment reports ``search: rg``. CI installs with ``pip install .``
into a fresh venv, so there this is the fresh-install check."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from broker import Broker


def test_ripgrep_is_a_dependency_with_binary_wheels() -> None:
    requires = metadata.requires("opsbroker") or []
    pins = [r for r in requires if re.match(r"ripgrep\b", r)]
    assert pins == ["ripgrep<15,>=14"] or pins == ["ripgrep>=14,<15"], requires
    assert metadata.version("ripgrep").startswith("14.")


async def test_the_installed_broker_searches_with_rg(tmp_path: Path) -> None:
    async with Broker(str(tmp_path)) as broker:
        assert broker.capabilities()["search"] == "rg"
