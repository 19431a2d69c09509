"""Strict checks of Kubernetes core objects against the ``kubernetes`` package's API models.

``ApiClient().deserialize`` builds a model from a dict but drops keys it does not know, so a
misspelt field would pass. :func:`problems` walks the dict beside the model's ``openapi_types``
and ``attribute_map`` and reports every unknown field and wrong type, the way ``kubectl apply``
(strict field validation) would; :func:`load` then builds the model, which checks required fields.
"""

from __future__ import annotations

import json
import re
from typing import Any

import kubernetes.client
from kubernetes.client import ApiClient

_LIST = re.compile(r"^List\[(.+)\]$")
_DICT = re.compile(r"^Dict\[str, (.+)\]$")
_PRIMITIVES: dict[str, type | tuple[type, ...]] = {
    "str": str,
    "int": int,
    "float": (int, float),
    "bool": bool,
    "datetime": str,
    "date": str,
    "bytes": str,  # base64 in a manifest (Secret.data)
}


def problems(value: Any, type_name: str, where: str = "") -> list[str]:
    """Every field of ``value`` that model ``type_name`` (e.g. ``"V1Secret"``) does not accept.

    Each problem names the field's path, e.g. ``spec.containers[0].portz: unknown field``.
    ``object`` (the models' int-or-string and free-form fields) accepts anything.
    """
    if value is None or type_name == "object":
        return []
    if match := _LIST.match(type_name):
        if not isinstance(value, list):
            return [f"{where}: expected a list, got {type(value).__name__}"]
        return [
            p for i, item in enumerate(value) for p in problems(item, match[1], f"{where}[{i}]")
        ]
    if match := _DICT.match(type_name):
        if not isinstance(value, dict):
            return [f"{where}: expected a map, got {type(value).__name__}"]
        return [p for k, item in value.items() for p in problems(item, match[1], f"{where}.{k}")]
    if type_name in _PRIMITIVES:
        wanted = _PRIMITIVES[type_name]
        if (isinstance(value, bool) and type_name != "bool") or not isinstance(value, wanted):
            return [f"{where}: expected {type_name}, got {type(value).__name__} {value!r}"]
        return []
    model = getattr(kubernetes.client, type_name)
    if not isinstance(value, dict):
        return [f"{where}: expected a {type_name} object, got {type(value).__name__}"]
    by_json_name = {json: attr for attr, json in model.attribute_map.items()}
    found = []
    for key, item in value.items():
        path = f"{where}.{key}" if where else key
        if key not in by_json_name:
            found.append(f"{path}: unknown field of {type_name}")
        else:
            found += problems(item, model.openapi_types[by_json_name[key]], path)
    return found


def load(value: dict[str, Any], type_name: str) -> Any:
    """``value`` as model ``type_name``, after :func:`problems` found nothing.

    Raises:
        AssertionError: when a field is unknown or of the wrong type (listing them all).
        ValueError: when the model refuses it (a required field missing).
    """
    found = problems(value, type_name)
    assert not found, "\n".join(found)
    return ApiClient().deserialize(json.dumps(value), type_name, "application/json")
