"""ls order: the reference's verified ICU order (pi-tools 2.9)."""

from __future__ import annotations

import random

from agent_side.tools._collation import collation_key

VERIFIED = [
    "_x",
    "-y",
    ".env",
    ".git",
    "#h",
    "~tmp",
    "10",
    "9",
    "a_b",
    "a-b",
    "a.b",
    "ab",
    "b.txt",
    "B2",
    "e",
    "é",
    "f",
    "Zeta",
    "zeta",
]


def test_verified_order() -> None:
    shuffled = VERIFIED[:]
    for seed in range(20):
        random.Random(seed).shuffle(shuffled)
        assert sorted(shuffled, key=collation_key) == VERIFIED


def test_decomposed_accent_sorts_with_its_base() -> None:
    names = ["f", "e\u0301", "e", "E"]
    assert sorted(names, key=collation_key) == ["E", "e", "e\u0301", "f"]


def test_latin_variants_sort_with_their_base_letters() -> None:
    """Orders printed by ICU (Node's ``localeCompare``)."""
    icu = "ae æ af d đ ð e h ħ i \u0131 j l ł m n ŋ o ø oe œ of p s \u017f ss ß st".split(" ")  # noqa: SIM905 - a printed order, kept on one line
    assert sorted(reversed(icu), key=collation_key) == icu
