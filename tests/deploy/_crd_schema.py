"""A small, strict check of an object against a CustomResourceDefinition's ``openAPIV3Schema``.

It covers what the agent-sandbox CRDs use (tests/data/agent-sandbox/): ``type``, ``properties``,
``required``, ``additionalProperties``, ``items``, ``enum``, ``minimum``, ``pattern``,
``x-kubernetes-int-or-string`` and ``x-kubernetes-preserve-unknown-fields``. A field the schema
does not name is a problem, as under ``kubectl apply``'s strict field validation (the API server
would otherwise prune it silently); ``metadata`` objects, which the CRD leaves open, are for
:mod:`._api_models` (``V1ObjectMeta``). Not covered: ``format`` (dates, quantities) and defaulting,
which only the API server applies.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import yaml

_TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
}


@functools.cache
def crd_schema(path: Path, version: str) -> tuple[str, str, dict[str, Any]]:
    """``(apiVersion, kind, openAPIV3Schema)`` of ``version`` in the CRD file at ``path``.

    Cached (the template's schema, a whole PodSpec, takes a while to parse): do not modify it.
    """
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    spec = crd["spec"]
    (served,) = [v for v in spec["versions"] if v["name"] == version]
    api_version = f"{spec['group']}/{version}"
    return api_version, spec["names"]["kind"], served["schema"]["openAPIV3Schema"]


def problems(value: Any, schema: dict[str, Any], where: str = "") -> list[str]:
    """Every way ``value`` breaks ``schema``, each naming the field's path."""
    here = where or "(root)"
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, int | str):
            return [f"{here}: expected an integer or a string, got {value!r}"]
        return []
    kind = schema.get("type")
    if kind is not None:
        wanted = _TYPES[kind]
        if (isinstance(value, bool) and kind != "boolean") or not isinstance(value, wanted):
            return [f"{here}: expected {kind}, got {type(value).__name__} {value!r}"]
    found: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{here}: {value!r} is not one of {schema['enum']}")
    if "minimum" in schema and value < schema["minimum"]:
        found.append(f"{here}: {value!r} is below the minimum {schema['minimum']}")
    if "pattern" in schema and not re.search(schema["pattern"], value):
        found.append(f"{here}: {value!r} does not match {schema['pattern']!r}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            found += problems(item, schema["items"], f"{where}[{i}]")
    if isinstance(value, dict):
        found += _object_problems(value, schema, where)
    return found


def _object_problems(value: dict[str, Any], schema: dict[str, Any], where: str) -> list[str]:
    found = [
        f"{where + '.' if where else ''}{name}: required field missing"
        for name in schema.get("required", [])
        if name not in value
    ]
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        path = f"{where}.{key}" if where else key
        if key in properties:
            found += problems(item, properties[key], path)
        elif isinstance(extra, dict):
            found += problems(item, extra, path)
        elif extra is True or schema.get("x-kubernetes-preserve-unknown-fields"):
            continue
        elif where.rpartition(".")[2] != "metadata":  # ObjectMeta: see _api_models
            found.append(f"{path}: unknown field")
    return found
