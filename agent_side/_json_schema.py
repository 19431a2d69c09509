"""A JSON Schema checker with TypeBox's keyword order and messages (reference section 5).

It covers the schema subset tools use: type, properties, required, additionalProperties, items,
prefixItems, enum, const, anyOf/oneOf/allOf/not, local $ref, and string, number and array bounds.
:func:`schema_errors` gives the model-visible ``(path, message)`` issues; :class:`Schema` is the
walker the coercion rules (``_coerce_typebox``, ``_coerce_ajv``) check candidates with.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from ._js import js_number_to_string

__all__ = [
    "MAX_ERRORS",
    "Schema",
    "declared_types",
    "is_number",
    "js_equal",
    "schema_errors",
    "type_matches",
]

MAX_ERRORS = 8
"""TypeBox's ``maxErrors``: more lines would bury the first mistake the model should fix."""


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def type_matches(name: str, value: Any) -> bool:
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        return is_number(value) and math.isfinite(value) and float(value).is_integer()
    if name == "number":
        return is_number(value) and math.isfinite(value)  # TypeBox and AJV refuse infinities
    if name == "null":
        return value is None
    if name == "string":
        return isinstance(value, str)
    return False


def declared_types(schema: Mapping[str, Any]) -> list[str] | None:
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list) and all(isinstance(t, str) for t in declared):
        return list(declared)
    return None


def js_equal(a: Any, b: Any) -> bool:
    if is_number(a) and is_number(b):
        return bool(a == b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(js_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(js_equal(v, b[k]) for k, v in a.items())
    return type(a) is type(b) and bool(a == b)


def _child(path: str, key: str | int) -> str:
    return f"{path}/{str(key).replace('~', '~0').replace('/', '~1')}"


class Schema:
    """A root schema: resolves local ``$ref`` pointers (``#``, ``#/$defs/X``, ``#/definitions/X``)."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root

    def resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            return None
        node: Any = self.root
        for part in ref[1:].split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node

    # -- checking (TypeBox's error walk, keyword order and messages) --

    def check(self, schema: Any, value: Any) -> bool:
        return not self.errors(schema, value, "", limit=1)

    def errors(
        self, schema: Any, value: Any, path: str, limit: int = MAX_ERRORS
    ) -> list[tuple[str, str, list[str]]]:
        out: list[tuple[str, str, list[str]]] = []
        self._walk(schema, value, path, out, limit)
        return out

    def _add(
        self,
        out: list[tuple[str, str, list[str]]],
        limit: int,
        path: str,
        message: str,
        missing: list[str] | None = None,
    ) -> bool:
        if len(out) < limit:
            out.append((path, message, missing or []))
        return False

    def _walk(
        self, schema: Any, value: Any, path: str, out: list[tuple[str, str, list[str]]], limit: int
    ) -> bool:
        if len(out) >= limit:
            return False
        if schema is True:
            return True
        if schema is False:
            return self._add(out, limit, path, "schema is false")
        if not isinstance(schema, Mapping):
            return True
        ok = True
        names = declared_types(schema)
        if names is not None and not any(type_matches(n, value) for n in names):
            declared = schema["type"]
            message = (
                f"must be {declared}"
                if isinstance(declared, str)
                else f"must be either {' or '.join(names)}"
            )
            ok = self._add(out, limit, path, message) and ok
        if isinstance(value, dict):
            ok = self._object(schema, value, path, out, limit) and ok
        if isinstance(value, list):
            ok = self._array(schema, value, path, out, limit) and ok
        if isinstance(value, str):
            ok = self._string(schema, value, path, out, limit) and ok
        if is_number(value):
            ok = self._number(schema, value, path, out, limit) and ok
        return self._logical(schema, value, path, out, limit) and ok

    def _object(
        self,
        schema: Mapping[str, Any],
        value: dict[str, Any],
        path: str,
        out: list[tuple[str, str, list[str]]],
        limit: int,
    ) -> bool:
        ok = True
        required = schema.get("required")
        if isinstance(required, list):
            missing = [k for k in required if isinstance(k, str) and k not in value]
            if missing:
                ok = self._add(
                    out, limit, path, f"must have required properties {', '.join(missing)}", missing
                )
        properties = schema.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        additional = schema.get("additionalProperties")
        if isinstance(additional, bool | Mapping):
            failed = False
            for key, item in value.items():
                if key not in properties and not self._walk(
                    additional, item, _child(path, key), out, limit
                ):
                    failed = True
            if failed:
                ok = self._add(out, limit, path, "must not have additional properties")
        for key, sub in properties.items():
            if key in value:
                ok = self._walk(sub, value[key], _child(path, key), out, limit) and ok
        for message in _size_messages(
            schema, len(value), "minProperties", "maxProperties", "properties"
        ):
            ok = self._add(out, limit, path, message)
        return ok

    def _array(
        self,
        schema: Mapping[str, Any],
        value: list[Any],
        path: str,
        out: list[tuple[str, str, list[str]]],
        limit: int,
    ) -> bool:
        ok = True
        items = schema.get("items")
        prefix = schema.get("prefixItems")
        if isinstance(items, list):
            for index, sub in enumerate(items[: len(value)]):
                ok = self._walk(sub, value[index], _child(path, index), out, limit) and ok
        elif isinstance(items, bool | Mapping):
            skip = len(prefix) if isinstance(prefix, list) else 0
            for index in range(skip, len(value)):
                ok = self._walk(items, value[index], _child(path, index), out, limit) and ok
        for message in _size_messages(schema, len(value), "minItems", "maxItems", "items"):
            ok = self._add(out, limit, path, message)
        if isinstance(prefix, list):
            for index, sub in enumerate(prefix[: len(value)]):
                ok = self._walk(sub, value[index], _child(path, index), out, limit) and ok
        if schema.get("uniqueItems") is True and any(
            js_equal(value[j], value[i]) for i in range(len(value)) for j in range(i)
        ):
            ok = self._add(out, limit, path, "must not have duplicate items")
        return ok

    def _string(
        self,
        schema: Mapping[str, Any],
        value: str,
        path: str,
        out: list[tuple[str, str, list[str]]],
        limit: int,
    ) -> bool:
        ok = True
        length = len(value)
        for message in _size_messages(schema, length, "minLength", "maxLength", "characters"):
            ok = self._add(out, limit, path, message)
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            try:
                matched = re.search(pattern, value) is not None
            except re.error:
                matched = False
            if not matched:
                ok = self._add(out, limit, path, f'must match pattern "{pattern}"')
        return ok

    def _number(
        self,
        schema: Mapping[str, Any],
        value: float,
        path: str,
        out: list[tuple[str, str, list[str]]],
        limit: int,
    ) -> bool:
        ok = True
        for keyword, op in (
            ("exclusiveMinimum", ">"),
            ("exclusiveMaximum", "<"),
            ("minimum", ">="),
            ("maximum", "<="),
        ):
            bound = _limit(schema, keyword)
            if bound is not None and not _compare(value, op, bound):
                ok = self._add(out, limit, path, f"must be {op} {js_number_to_string(bound)}")
        divisor = _limit(schema, "multipleOf")
        if divisor and not _multiple_of(value, divisor):
            ok = self._add(out, limit, path, f"must be multiple of {js_number_to_string(divisor)}")
        return ok

    def _logical(
        self,
        schema: Mapping[str, Any],
        value: Any,
        path: str,
        out: list[tuple[str, str, list[str]]],
        limit: int,
    ) -> bool:
        ok = True
        ref = schema.get("$ref")
        if isinstance(ref, str):
            target = self.resolve(ref)
            sub: list[tuple[str, str, list[str]]] = []
            if target is None:
                self._add(sub, MAX_ERRORS, path, "schema is false")
            if target is None or not self._walk(target, value, path, sub, MAX_ERRORS):
                for issue in sub:
                    self._add(out, limit, *issue)
                ok = False
        if "const" in schema and not js_equal(value, schema["const"]):
            ok = self._add(out, limit, path, "must be equal to constant")
        options = schema.get("enum")
        if isinstance(options, list) and not any(js_equal(value, o) for o in options):
            ok = self._add(out, limit, path, "must be equal to one of the allowed values")
        negated = schema.get("not")
        if isinstance(negated, bool | Mapping) and self.check(negated, value):
            ok = self._add(out, limit, path, "must not be valid")
        for keyword in ("allOf", "anyOf", "oneOf"):
            operands = schema.get(keyword)
            if not isinstance(operands, list):
                continue
            results = [self.errors(s, value, path) for s in operands]
            failed = [r for r in results if r]
            passed = len(results) - len(failed)
            if keyword == "allOf" and failed:
                for r in failed:
                    for issue in r:
                        self._add(out, limit, *issue)
                ok = False
            elif keyword == "anyOf" and passed == 0:
                for r in failed:
                    for issue in r:
                        self._add(out, limit, *issue)
                ok = self._add(out, limit, path, "must match a schema in anyOf")
            elif keyword == "oneOf" and passed != 1:
                if passed == 0:
                    for r in failed:
                        for issue in r:
                            self._add(out, limit, *issue)
                ok = self._add(out, limit, path, "must match exactly one schema in oneOf")
        return ok


def _limit(schema: Mapping[str, Any], keyword: str) -> int | float | None:
    bound = schema.get(keyword)
    return bound if isinstance(bound, int | float) and not isinstance(bound, bool) else None


def _compare(value: float, op: str, bound: float) -> bool:
    if op == ">":
        return value > bound
    if op == "<":
        return value < bound
    if op == ">=":
        return value >= bound
    return value <= bound


def _size_messages(
    schema: Mapping[str, Any], size: int, low_key: str, high_key: str, noun: str
) -> list[str]:
    messages = []
    low = _limit(schema, low_key)
    if low is not None and size < low:
        messages.append(f"must not have fewer than {js_number_to_string(low)} {noun}")
    high = _limit(schema, high_key)
    if high is not None and size > high:
        messages.append(f"must not have more than {js_number_to_string(high)} {noun}")
    return messages


def _multiple_of(value: float, divisor: float) -> bool:
    if float(value).is_integer() and (1 / divisor) % 1 == 0:
        return True
    remainder = math.fmod(value, divisor)
    return min(abs(remainder), abs(remainder - divisor), abs(remainder + divisor)) < 1e-10


def _issue_path(path: str, missing: list[str]) -> str:
    if missing:
        path = _child(path, missing[0])
    return path[1:].replace("/", ".") if path else "root"


def schema_errors(schema: Mapping[str, Any], value: Any) -> list[tuple[str, str]]:
    """The ``(path, message)`` issues of ``value`` against ``schema`` (empty when it passes)."""
    return [
        (_issue_path(path, missing), message)
        for path, message, missing in Schema(schema).errors(schema, value, "")
    ]
