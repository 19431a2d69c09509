"""docs/policy-reference.md is generated from the Policy model and must not drift from it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from operations import Policy

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gen_policy_docs.py"


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_policy_docs", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reference_matches_the_model() -> None:
    generator = _generator()
    assert generator.TARGET.read_text() == generator.render(), (
        "docs/policy-reference.md is stale: run scripts/gen_policy_docs.py"
    )
    assert generator.main(["--check"]) == 0


def test_every_key_is_documented() -> None:
    text = _generator().render()
    for name, info in Policy.model_fields.items():
        section = info.annotation
        if isinstance(section, type) and hasattr(section, "model_fields"):
            for key in section.model_fields:
                assert f"`{name}.{key}`" in text
        else:
            assert f"`{name}`" in text
