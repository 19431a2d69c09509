"""Publishing a pydantic parameters model as the JSON Schema a provider sees.

pydantic's ``model_json_schema()`` differs from what the reference's TypeBox schemas look like in
three ways that change model-visible behaviour, so it is reshaped here:

- an optional field ``x: T | None = None`` becomes ``anyOf: [T, null]``: published as is, an
  explicit ``null`` would be kept and a wrong value would report three ``anyOf`` lines. It is
  published as an optional non-nullable ``T`` (TypeBox ``Type.Optional(T)``); a field that must
  accept ``null`` should be required, or have a default other than ``None``;
- nested models are ``$ref``s into ``$defs``: they are inlined, as TypeBox nests objects
  (a recursive model keeps its ``$ref``);
- every node has a generated ``title``: removed.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, WithJsonSchema

__all__ = ["JsonNumber", "publish_model_schema"]

_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
_SCHEMA_VALUES = ("additionalProperties", "items", "not", "if", "then", "else", "contains")


def publish_model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The published JSON Schema of ``model`` (see the module docstring for the reshaping)."""
    schema = model.model_json_schema()
    defs: dict[str, Any] = schema.get("$defs", {})
    recursive: set[str] = set()
    published: dict[str, Any] = _reshape(schema, defs, (), recursive)
    published.pop("$defs", None)
    if recursive:
        published["$defs"] = {
            name: _reshape(defs[name], defs, (name,), set()) for name in sorted(recursive)
        }
    return published


def _reshape(node: Any, defs: dict[str, Any], stack: tuple[str, ...], recursive: set[str]) -> Any:
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        if name in stack or name not in defs:
            recursive.add(name)
            return {k: v for k, v in node.items() if k != "title"}
        target = _reshape(defs[name], defs, (*stack, name), recursive)
        siblings = {k: _reshape(v, defs, stack, recursive) for k, v in node.items()}
        siblings.pop("$ref")
        siblings.pop("title", None)
        return {**target, **siblings}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_reshape(v, defs, stack, recursive) for v in value]
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {k: _reshape(v, defs, stack, recursive) for k, v in value.items()}
        elif key in _SCHEMA_VALUES:
            out[key] = _reshape(value, defs, stack, recursive)
        else:
            out[key] = value
    if isinstance(out.get("properties"), dict):
        required = set(out.get("required", ()))
        out["properties"] = {
            name: prop if name in required else _drop_optional_null(prop)
            for name, prop in out["properties"].items()
        }
    return out


def _drop_optional_null(prop: Any) -> Any:
    """``{anyOf: [T, {type: null}], default: None, ...}`` -> ``{...T, ...}`` (optional, not nullable)."""
    if not isinstance(prop, dict) or "default" not in prop or prop["default"] is not None:
        return prop
    arms = prop.get("anyOf")
    if not isinstance(arms, list):
        return prop
    rest = [arm for arm in arms if arm != {"type": "null"}]
    if len(rest) == len(arms):
        return prop
    others = {k: v for k, v in prop.items() if k not in ("anyOf", "default")}
    if len(rest) == 1 and isinstance(rest[0], dict):
        return {**rest[0], **others}
    return {"anyOf": rest, **others}


JsonNumber = Annotated[int | float, WithJsonSchema({"type": "number"})]
"""A parameter published as JSON Schema ``number`` (TypeBox ``Type.Number()``) whose value stays
an ``int`` when it is integral: ``"5"`` gives ``5``, not ``5.0`` as a ``float`` field would, and a
wrong value reports ``must be number`` (an ``int`` field reports ``must be integer``)."""
