"""JavaScript value semantics used in model-visible texts (Number(), String(n), JSON.stringify)."""

from __future__ import annotations

import math
from typing import Any

import pytest

import agent_side
import agent_side.loop
from agent_side._js import js_number, js_number_to_string, js_stringify


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("5", 5),
        (" 5 ", 5),
        ("\n5\t", 5),
        ("", 0),
        ("   ", 0),
        ("1.5", 1.5),
        (".5", 0.5),
        ("5.", 5),
        ("-2", -2),
        ("+3", 3),
        ("1e3", 1000),
        ("0x1A", 26),
        ("0b101", 5),
        ("0o17", 15),
        ("Infinity", math.inf),
        ("abc", None),
        ("inf", None),
        ("1_000", None),
        ("nan", None),
        ("0x", None),
        ("5px", None),
    ],
)
def test_number_parsing(text: str, expected: Any) -> None:
    result = js_number(text)
    assert result == expected
    if isinstance(expected, int) and not isinstance(expected, bool):
        assert isinstance(result, int)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, "1"),
        (1.0, "1"),
        (-0.0, "0"),
        (1.5, "1.5"),
        (0.1, "0.1"),
        (1e16, "10000000000000000"),
        (1e21, "1e+21"),
        (1.5e-7, "1.5e-7"),
        (0.000001, "0.000001"),
        (123456789.125, "123456789.125"),
        (-2.5e30, "-2.5e+30"),
        (math.nan, "NaN"),
        (math.inf, "Infinity"),
        (True, "true"),
    ],
)
def test_number_to_string(value: float, expected: str) -> None:
    assert js_number_to_string(value) == expected


def test_stringify_matches_json_stringify() -> None:
    value = {"a": [1.0, {"b": None}], "s": "tab\there \u0001 \u2028 é", "e": {}, "n": math.nan}
    assert js_stringify(value) == (
        '{\n  "a": [\n    1,\n    {\n      "b": null\n    }\n  ],\n'
        '  "s": "tab\\there \\u0001 \u2028 é",\n  "e": {},\n  "n": null\n}'
    )
    assert js_stringify([1, "x"], 0) == '[1,"x"]'


@pytest.mark.parametrize("module", [agent_side, agent_side.loop])
def test_exports_resolve(module: Any) -> None:
    for name in module.__all__:
        assert getattr(module, name) is not None, name
