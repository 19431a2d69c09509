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
  ``Value.Convert`` rules (``_coerce_typebox``: e.g. ``"1"`` -> ``true``, ``null`` -> ``"null"``
  for a string, a single value wrapped into an array);
- tools with a **plain JSON Schema** dict (extension and MCP tools) get the AJV-style rules
  (``_coerce_ajv``: ``"1"`` is not a boolean, ``null`` -> ``""`` for a string, no array wrapping).

The check is ``_json_schema`` (TypeBox's keyword order and messages). For a pydantic tool the
checked arguments are then turned into the model; constraints only pydantic knows (custom validators) report in the same
format with pydantic's message. The result is the model instance, or the coerced dict.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from ._coerce_ajv import coerce_json_schema
from ._coerce_typebox import convert_value
from ._js import js_stringify
from ._json_schema import MAX_ERRORS, Schema, schema_errors
from ._messages import ToolCall
from ._tool import Tool, parameters_schema

__all__ = ["ToolValidationError", "validate_tool_arguments", "validate_tool_call"]


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


def validate_tool_arguments(tool: Tool, tool_call: ToolCall) -> Any:
    """Coerce and check ``tool_call.arguments`` for ``tool``; return what ``execute`` receives.

    Raises :class:`ToolValidationError` with the reference's text when the arguments do not fit.
    The caller's arguments are never modified.
    """
    schema = parameters_schema(tool.parameters)
    root = Schema(schema)
    args: Any = copy.deepcopy(tool_call.arguments)
    _drop_optional_nulls(args, schema, root)
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


def _drop_optional_nulls(value: Any, schema: Any, root: Schema) -> None:
    """Delete, in place, each optional property that is ``null`` where its schema rejects ``null``."""
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
                and not root.check(sub, None)
            ):
                del value[key]
            else:
                _drop_optional_nulls(value[key], sub, root)
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, Mapping):
        for item in value:
            _drop_optional_nulls(item, items, root)


def validate_tool_call(tools: Sequence[Tool], tool_call: ToolCall) -> Any:
    """Find the tool by name (``Tool "<name>" not found`` otherwise) and validate the call."""
    for tool in tools:
        if tool.name == tool_call.name:
            return validate_tool_arguments(tool, tool_call)
    raise LookupError(f'Tool "{tool_call.name}" not found')
