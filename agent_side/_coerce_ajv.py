"""AJV-style type coercion, applied to tools whose parameters are a plain JSON Schema dict.

Extension and MCP tools get these rules, as the reference's AJV ``coerceTypes`` runs them:
``"1"`` is not a boolean, ``null`` -> ``""`` for a string, and no array wrapping.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from ._js import js_number, js_to_string, number_value
from ._json_schema import Schema, declared_types, is_number, type_matches

__all__ = ["coerce_json_schema"]

_MISSING = object()


def _coerce_scalar(name: str, value: Any) -> Any:
    """Coerce ``value`` to the JSON type ``name``, or return ``_MISSING`` when it cannot be."""
    if name in ("number", "integer"):
        if value is None:
            return 0
        if isinstance(value, bool):
            return 1 if value else 0
        if isinstance(value, str) and value.strip():
            number = js_number(value)
            if number is None or not math.isfinite(number):
                return _MISSING
            if name == "integer" and not float(number).is_integer():
                return _MISSING
            return number_value(number)
        return _MISSING
    if name == "boolean":
        if value in ("true", "false") and isinstance(value, str):
            return value == "true"
        if is_number(value) and value in (0, 1):
            return value == 1
        if value is None:
            return False
        return _MISSING
    if name == "string":
        if value is None:
            return ""
        if isinstance(value, bool) or is_number(value):
            return js_to_string(value)
        return _MISSING
    if name == "null":
        if value == "" or value is False or (is_number(value) and value == 0):
            return None
        return _MISSING
    return _MISSING


def coerce_json_schema(schema: Any, value: Any, root: Schema) -> Any:
    """The AJV-style coercion for plain JSON Schema: containers in place, scalars returned."""
    if not isinstance(schema, Mapping):
        return value
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = root.resolve(ref)
        value = coerce_json_schema(target, value, root) if target is not None else value
    every = schema.get("allOf")
    if isinstance(every, list):
        for member in every:
            value = coerce_json_schema(member, value, root)
    for keyword in ("anyOf", "oneOf"):
        union = schema.get(keyword)
        if isinstance(union, list) and not any(root.check(m, value) for m in union):
            for member in union:
                candidate = coerce_json_schema(member, copy.deepcopy(value), root)
                if root.check(member, candidate):
                    value = candidate
                    break
    names = declared_types(schema)
    if names is not None and not any(type_matches(n, value) for n in names):
        for name in names:
            coerced = _coerce_scalar(name, value)
            if coerced is not _MISSING:
                value = coerced
                break
    if isinstance(value, dict):
        properties = schema.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        for key, sub in properties.items():
            if key in value:
                value[key] = coerce_json_schema(sub, value[key], root)
        additional = schema.get("additionalProperties")
        if isinstance(additional, Mapping):
            for key in value:
                if key not in properties:
                    value[key] = coerce_json_schema(additional, value[key], root)
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            value[:] = [coerce_json_schema(items, item, root) for item in value]
    return value
