"""The order ``ls`` lists names in: close to ICU root collation of the lower-cased names.

The reference sorts with ``localeCompare`` (ICU, punctuation not ignored), so ``_x`` and ``-y``
come before ``.env``, digits compare one by one (``10`` before ``9``), and ``é`` sorts right after
``e``. This key reproduces that for ASCII and Latin names (accents, ``ø``, ``ß``, ``æ``...); other
scripts sort after Latin by code point. Equal names (``Zeta``/``zeta``) fall back to code point order, so every backend
lists them the same way.
"""

from __future__ import annotations

import unicodedata

__all__ = ["collation_key"]

# ASCII punctuation and symbols in root collation order (whitespace comes first, then these).
_PUNCTUATION = "_-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$"
_RANK = {ch: i for i, ch in enumerate(_PUNCTUATION)}
# Letters root collation sorts as (a variant of) other letters; NFD does not decompose them.
_VARIANTS = {
    "ø": "o", "đ": "d", "ð": "d", "ħ": "h", "\u0131": "i", "ł": "l", "ŋ": "n", "\u017f": "s",
    "ß": "ss", "æ": "ae", "œ": "oe",
}  # fmt: skip
_VARIANT_MARK = "\u0338"  # sorts a variant right after its plain letters
_STROKE_MARK = "\u0335"  # ... and "đ" before "ð", as ICU does


def _primary(ch: str) -> tuple[int, int]:
    if ch.isspace():
        return (0, ord(ch))
    if ch in _RANK:
        return (1, _RANK[ch])
    if ch.isdigit():
        return (3, unicodedata.digit(ch, 0))
    if ch.isalpha():
        return (4, ord(ch))
    return (2, ord(ch))


def collation_key(name: str) -> tuple[object, ...]:
    """Sort key: base letters, then accents, then the raw name."""
    base: list[tuple[int, int]] = []
    accents: list[str] = []
    for ch in unicodedata.normalize("NFD", name.lower()):
        if unicodedata.combining(ch) and base:
            accents[-1] += ch
            continue
        variant = _VARIANTS.get(ch)
        if variant is not None:
            for letter in variant:
                base.append(_primary(letter))
                accents.append(_STROKE_MARK if ch == "đ" else _VARIANT_MARK)
            continue
        base.append(_primary(ch))
        accents.append("")
    return (tuple(base), tuple(accents), name)
