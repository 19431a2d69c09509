"""Argument validation: clone, drop optional nulls, coerce, check (reference section 5).

The model's arguments are untrusted JSON. :func:`validate_tool_arguments` never mutates them: it
works on a deep copy, deletes ``null`` for optional properties whose schema rejects ``null``,
applies the documented coercions, then checks the result against the published JSON Schema and
either returns it or raises :class:`ToolValidationError` whose text is, byte for byte::

    Validation failed for tool "<name>":
      - <path>: <message>

    Received arguments:
    <JSON.stringify(arguments, null, 2)>

Two coercion rule sets exist, as in the reference:

- tools whose parameters are a **pydantic model** (the built-in tools) get TypeBox's
  ``Value.Convert`` rules (e.g. ``"1"`` -> ``true``, ``null`` -> ``"null"`` for a string, a single
  value wrapped into an array);
- tools with a **plain JSON Schema** dict (extension and MCP tools) get the AJV-style rules
  (``"1"`` is not a boolean, ``null`` -> ``""`` for a string, no array wrapping).

The checker implements the schema subset tools use (type, properties, required,
additionalProperties, items, enum, const, anyOf/oneOf/allOf/not, $ref, string, number and array
bounds) with TypeBox's keyword order and messages. For a pydantic tool the checked arguments are
then turned into the model; constraints only pydantic knows (custom validators) report in the same
format with pydantic's message. The result is the model instance, or the coerced dict.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from ._js import js_number, js_number_to_string, js_stringify, js_to_string, number_value
from ._messages import ToolCall
from ._tool import Tool, parameters_schema

__all__ = [
    "ToolValidationError",
    "coerce_json_schema",
    "convert_value",
    "schema_errors",
    "validate_tool_arguments",
    "validate_tool_call",
]

MAX_ERRORS = 8
"""TypeBox's ``maxErrors``: more lines would bury the first mistake the model should fix."""

_MISSING = object()


class ToolValidationError(ValueError):
    """The arguments do not satisfy the tool's schema; ``str()`` is the model-visible text."""

    def __init__(self, tool_name: str, issues: Sequence[tuple[str, str]], arguments: Any) -> None:
        self.tool_name = tool_name
        self.issues = list(issues)
        lines = "\n".join(f"  - {path}: {message}" for path, message in self.issues)
        text = (
            f'Validation failed for tool "{tool_name}":\n'
            f"{lines or 'Unknown validation error'}\n\n"
            f"Received arguments:\n{js_stringify(arguments, 2)}"
        )
        super().__init__(text)


# --- JSON Schema basics ---------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _type_matches(name: str, value: Any) -> bool:
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        return _is_number(value) and math.isfinite(value) and float(value).is_integer()
    if name == "number":
        return _is_number(value)
    if name == "null":
        return value is None
    if name == "string":
        return isinstance(value, str)
    return False


def _types(schema: Mapping[str, Any]) -> list[str] | None:
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list) and all(isinstance(t, str) for t in declared):
        return list(declared)
    return None


def _js_equal(a: Any, b: Any) -> bool:
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_js_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_js_equal(v, b[k]) for k, v in a.items())
    return type(a) is type(b) and bool(a == b)


def _child(path: str, key: str | int) -> str:
    return f"{path}/{str(key).replace('~', '~0').replace('/', '~1')}"


class _Schema:
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
        names = _types(schema)
        if names is not None and not any(_type_matches(n, value) for n in names):
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
        if _is_number(value):
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
            _js_equal(value[j], value[i]) for i in range(len(value)) for j in range(i)
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
        if "const" in schema and not _js_equal(value, schema["const"]):
            ok = self._add(out, limit, path, "must be equal to constant")
        options = schema.get("enum")
        if isinstance(options, list) and not any(_js_equal(value, o) for o in options):
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

    # -- optional nulls --

    def drop_optional_nulls(self, value: Any, schema: Any) -> None:
        if not isinstance(schema, Mapping):
            return
        properties = schema.get("properties")
        if isinstance(value, dict) and isinstance(properties, Mapping):
            required = schema.get("required")
            required = set(required) if isinstance(required, list) else set()
            for key, sub in properties.items():
                if key not in value:
                    continue
                if (
                    value[key] is None
                    and key not in required
                    and not (isinstance(sub, Mapping) and "$ref" in sub)
                    and not self.check(sub, None)
                ):
                    del value[key]
                else:
                    self.drop_optional_nulls(value[key], sub)
        items = schema.get("items")
        if isinstance(value, list) and isinstance(items, Mapping):
            for item in value:
                self.drop_optional_nulls(item, items)


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


# --- TypeBox Value.Convert (pydantic-declared tools) ----------------------------------------


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
    if _is_number(number) and math.isfinite(number):
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
    if _is_number(value) and value in (0, 1):
        return value == 1
    if value is None:
        return False
    return value


def _to_string(value: Any) -> Any:
    if isinstance(value, bool) or _is_number(value) or value is None:
        return js_to_string(value)
    return value


def _to_null(value: Any) -> Any:
    if value in ("", "0", "null", "undefined") and isinstance(value, str):
        return None
    if (_is_number(value) and value == 0) or value is False:
        return None
    return value


_TYPEBOX_SCALARS = {
    "number": _to_number,
    "integer": _to_integer,
    "boolean": _to_boolean,
    "string": _to_string,
    "null": _to_null,
}


def convert_value(schema: Any, value: Any, root: _Schema) -> Any:
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
    elif _is_number(constant):
        converted = _to_number(value)
    elif isinstance(constant, str):
        converted = _to_string(value)
    else:
        return value
    return converted if _js_equal(converted, constant) else value


# --- AJV-style coercion (plain JSON Schema tools) -------------------------------------------


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
        if _is_number(value) and value in (0, 1):
            return value == 1
        if value is None:
            return False
        return _MISSING
    if name == "string":
        if value is None:
            return ""
        if isinstance(value, bool) or _is_number(value):
            return js_to_string(value)
        return _MISSING
    if name == "null":
        if value == "" or value is False or (_is_number(value) and value == 0):
            return None
        return _MISSING
    return _MISSING


def coerce_json_schema(schema: Any, value: Any, root: _Schema) -> Any:
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
    names = _types(schema)
    if names is not None and not any(_type_matches(n, value) for n in names):
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


# --- entry points ---------------------------------------------------------------------------


def _issue_path(path: str, missing: list[str]) -> str:
    if missing:
        path = _child(path, missing[0])
    return path[1:].replace("/", ".") if path else "root"


def schema_errors(schema: Mapping[str, Any], value: Any) -> list[tuple[str, str]]:
    """The ``(path, message)`` issues of ``value`` against ``schema`` (empty when it passes)."""
    return [
        (_issue_path(path, missing), message)
        for path, message, missing in _Schema(schema).errors(schema, value, "")
    ]


def validate_tool_arguments(tool: Tool, tool_call: ToolCall) -> Any:
    """Coerce and check ``tool_call.arguments`` for ``tool``; return what ``execute`` receives.

    Raises :class:`ToolValidationError` with the reference's text when the arguments do not fit.
    The caller's arguments are never modified.
    """
    schema = parameters_schema(tool.parameters)
    root = _Schema(schema)
    args: Any = copy.deepcopy(tool_call.arguments)
    root.drop_optional_nulls(args, schema)
    model = tool.parameters if isinstance(tool.parameters, type) else None
    if model is not None:
        convert_value(schema, args, root)  # in place, as Value.Convert; the return is ignored
    else:
        coerced = coerce_json_schema(schema, args, root)
        if isinstance(args, dict) and isinstance(coerced, dict):
            args = coerced
    issues = schema_errors(schema, args)
    if issues:
        raise ToolValidationError(tool.name, issues, tool_call.arguments)
    if model is None:
        return args
    return _build_model(tool.name, model, args, tool_call.arguments)


def _build_model(name: str, model: type[BaseModel], args: Any, received: Any) -> BaseModel:
    try:
        return model.model_validate(args)
    except ValidationError as exc:
        issues = [
            (".".join(str(p) for p in error["loc"]) or "root", error["msg"])
            for error in exc.errors(include_url=False)
        ]
        raise ToolValidationError(name, issues[:MAX_ERRORS], received) from None


def validate_tool_call(tools: Sequence[Tool], tool_call: ToolCall) -> Any:
    """Find the tool by name (``Tool "<name>" not found`` otherwise) and validate the call."""
    for tool in tools:
        if tool.name == tool_call.name:
            return validate_tool_arguments(tool, tool_call)
    raise LookupError(f'Tool "{tool_call.name}" not found')
