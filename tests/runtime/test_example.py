"""scripts/example_loop.py runs and prints the documented event order."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "scripts" / "example_loop.py"


async def test_example_prints_completion_ordered_ends_and_source_ordered_results(
    capsys: pytest.CaptureFixture[str],
) -> None:
    namespace = runpy.run_path(str(EXAMPLE))
    await namespace["main"]()
    lines = capsys.readouterr().out.splitlines()
    events = [json.loads(line) for line in lines[:-1]]
    order = [(e["type"], e.get("toolCallId") or e["message"]["toolCallId"]) for e in events]
    assert order[:3] == [("tool_execution_start", f"call_{i}") for i in (1, 2, 3)]
    ends = [call for kind, call in order if kind == "tool_execution_end"]
    assert ends[-1] == "call_1"  # the slow read finishes last
    starts = [call for kind, call in order if kind == "message_start"]
    assert starts == ["call_1", "call_2", "call_3"]
    assert lines[-1] == "results in order: ['call_1', 'call_2', 'call_3']; terminate=False"
