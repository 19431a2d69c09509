"""TypeBox's ``Value.Convert`` rules, applied to tools whose parameters are a pydantic model.

These are the built-in tools' coercions, as the reference's TypeBox runs them before checking:
``"1"`` -> ``true``, ``null`` -> ``"null"`` for a string, a single value wrapped into an array,
and a union member converted only when the value fits no member as it is.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from ._js import js_number, js_to_string
from ._json_schema import Schema, is_number, js_equal

__all__ = ["convert_value"]


def _to_number(value: Any) -> Any:
    if isinstance(value, bool):
        return 1 if value else 0
    if isinstance(value, str):
        if value in ("true", "false"):
            return 1 if value == "true" else 0
        number = js_number(value)
        return value if number is None else number
    if value is None:
        return 0
    return value


def _to_integer(value: Any) -> Any:
    number = _to_number(value)
    if is_number(number) and math.isfinite(number):
        return int(number)
    return number


def _to_boolean(value: Any) -> Any:
    if isinstance(value, str):
        lowered = value.lower()
        if lowered in ("true", "1"):
            return True
        if lowered in ("false", "0"):
            return False
        return value
    if is_number(value) and value in (0, 1):
        return value == 1
    if value is None:
        return False
    return value


def _to_string(value: Any) -> Any:
    if isinstance(value, bool) or is_number(value) or value is None:
        return js_to_string(value)
    return value


def _to_null(value: Any) -> Any:
    if value in ("", "0", "null", "undefined") and isinstance(value, str):
        return None
    if (is_number(value) and value == 0) or value is False:
        return None
    return value


_TYPEBOX_SCALARS = {
    "number": _to_number,
    "integer": _to_integer,
    "boolean": _to_boolean,
    "string": _to_string,
    "null": _to_null,
}


def convert_value(schema: Any, value: Any, root: Schema) -> Any:
    """TypeBox ``Value.Convert`` on one value: containers are converted in place and returned."""
    if not isinstance(schema, Mapping):
        return value
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = root.resolve(ref)
        return convert_value(target, value, root) if target is not None else value
    union = schema.get("anyOf", schema.get("oneOf"))
    if isinstance(union, list):
        if any(root.check(member, value) for member in union):
            return value
        for member in union:
            candidate = convert_value(member, copy.deepcopy(value), root)
            if root.check(member, candidate):
                return candidate
        return value
    every = schema.get("allOf")
    if isinstance(every, list):
        for member in every:
            value = convert_value(member, value, root)
        return value
    if "const" in schema:
        return _convert_literal(schema["const"], value)
    declared = schema.get("type")
    if declared == "object":
        if isinstance(value, dict):
            properties = schema.get("properties")
            properties = properties if isinstance(properties, Mapping) else {}
            for key, sub in properties.items():
                if key in value:
                    value[key] = convert_value(sub, value[key], root)
            additional = schema.get("additionalProperties")
            if isinstance(additional, Mapping):
                for key in value:
                    if key not in properties:
                        value[key] = convert_value(additional, value[key], root)
        return value
    if declared == "array":
        items = value if isinstance(value, list) else [value]
        sub = schema.get("items")
        if isinstance(sub, Mapping):
            items[:] = [convert_value(sub, item, root) for item in items]
        return items
    if isinstance(declared, str) and declared in _TYPEBOX_SCALARS:
        return _TYPEBOX_SCALARS[declared](value)
    return value


def _convert_literal(constant: Any, value: Any) -> Any:
    if isinstance(constant, bool):
        converted = _to_boolean(value)
    elif is_number(constant):
        converted = _to_number(value)
    elif isinstance(constant, str):
        converted = _to_string(value)
    else:
        return value
    return converted if js_equal(converted, constant) else value
