"""``agent_side.tools`` exports its public names, sorted, and each exists."""

from __future__ import annotations

import agent_side.tools as tools


def test_exports() -> None:
    assert tools.__all__ == sorted(tools.__all__)
    assert all(hasattr(tools, name) for name in tools.__all__)
    for name in tools.ALL_TOOL_NAMES:
        assert f"create_{name}_tool" in tools.__all__
        assert f"create_{name}_tool_definition" in tools.__all__
    assert {"create_all_tools", "create_coding_tools", "create_read_only_tools"} <= set(
        tools.__all__
    )
