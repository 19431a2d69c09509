"""JavaScript value semantics that model-visible texts depend on.

The reference is JavaScript: a coerced ``"5"`` is ``+"5"``, a number in a message is
``String(n)``, and the echoed arguments are ``JSON.stringify(args, null, 2)``. Python's ``float()``,
``str()`` and ``json.dumps`` differ at the edges (``"inf"``, ``1e16``, ``1.0``, ``NaN``), so these
helpers reproduce the JavaScript results.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

__all__ = ["js_number", "js_number_to_string", "js_stringify", "js_to_string", "number_value"]

# ECMAScript StrWhiteSpaceChar: what Number() trims.
_JS_WHITESPACE = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_INFINITY = re.compile(r"([+-]?)Infinity")
_RADIX = {"0x": 16, "0X": 16, "0o": 8, "0O": 8, "0b": 2, "0B": 2}


def number_value(value: float) -> int | float:
    """A JS number as the Python value a tool sees: integral finite values become ``int``."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def js_number(text: str) -> int | float | None:
    """``Number(text)``, or ``None`` where JavaScript gives ``NaN``. ``""`` and blanks give 0."""
    body = text.strip(_JS_WHITESPACE)
    if body == "":
        return 0
    if _DECIMAL.fullmatch(body):
        return number_value(float(body))
    infinity = _INFINITY.fullmatch(body)
    if infinity:
        return -math.inf if infinity.group(1) == "-" else math.inf
    radix = _RADIX.get(body[:2])
    if radix is not None and len(body) > 2:
        try:
            return int(body[2:], radix)
        except ValueError:
            return None
    return None


def js_number_to_string(value: float) -> str:
    """``String(n)`` for a JS number (``1`` not ``1.0``, ``1e+21``, ``1e-7``, ``NaN``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and abs(value) < 10**21:
        return str(value)
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0"
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    sign, digit_tuple, exponent = Decimal(repr(value)).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    assert isinstance(exponent, int)
    point = len("".join(map(str, digit_tuple))) + exponent  # value = 0.<digits> * 10**point
    prefix = "-" if sign else ""
    k = len(digits)
    if k <= point <= 21:
        return prefix + digits + "0" * (point - k)
    if 0 < point <= 21:
        return prefix + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return prefix + "0." + "0" * (-point) + digits
    e = point - 1
    mantissa = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{prefix}{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"


def js_to_string(value: Any) -> str:
    """``String(v)`` for the JSON values a tool call can carry."""
    if value is None:
        return "null"
    if isinstance(value, bool | int | float):
        return js_number_to_string(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ",".join("" if v is None else js_to_string(v) for v in value)
    return "[object Object]"


def _quote(text: str) -> str:
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\b":
            out.append("\\b")
        elif ch == "\f":
            out.append("\\f")
        elif code < 0x20 or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def js_stringify(value: Any, indent: int = 2) -> str:
    """``JSON.stringify(value, null, indent)`` for JSON-like Python values."""
    return _stringify(value, " " * indent, "")


def _stringify(value: Any, gap: str, current: str) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            return "null"
        return js_number_to_string(value)
    if isinstance(value, str):
        return _quote(value)
    inner = current + gap
    if isinstance(value, list | tuple):
        if not value:
            return "[]"
        items = [_stringify(v, gap, inner) for v in value]
        if not gap:
            return "[" + ",".join(items) + "]"
        return "[\n" + inner + (",\n" + inner).join(items) + "\n" + current + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        sep = ": " if gap else ":"
        members = [_quote(str(k)) + sep + _stringify(v, gap, inner) for k, v in value.items()]
        if not gap:
            return "{" + ",".join(members) + "}"
        return "{\n" + inner + (",\n" + inner).join(members) + "\n" + current + "}"
    return _quote(str(value))
