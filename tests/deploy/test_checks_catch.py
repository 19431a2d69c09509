"""The manifest checks can fail: each broken copy of a shipped manifest is refused, naming the
field, by the API-model check and (for agent-sandbox objects) the CRD-schema check."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from . import _api_models, _crd_schema
from .test_manifests import CORE, CRD_FILES, CRDS, OBJECTS


@dataclass(frozen=True)
class Break:
    name: str
    kind: str
    change: Callable[[dict[str, Any]], None]
    complaint: str  # a substring of the problem reported


def _container(obj: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = obj["spec"]["podTemplate"]["spec"]["containers"][0]
    return container


BREAKS = [
    Break(
        "unknown pod field", "SandboxTemplate", lambda o: _container(o).update(portz=[]), "portz"
    ),
    Break(
        "port as a string",
        "SandboxTemplate",
        lambda o: _container(o)["ports"][0].update(containerPort="8080"),
        "containerPort",
    ),
    Break(
        "probe misspelt",
        "SandboxTemplate",
        lambda o: _container(o)["livenessProbe"].update(grcp={"port": 9090}),
        "grcp",
    ),
    Break(
        "unknown template field",
        "SandboxTemplate",
        lambda o: o["spec"].update(networkPolicyMode="Unmanaged"),
        "networkPolicyMode",
    ),
    Break(
        "bad enum",
        "SandboxWarmPool",
        lambda o: o["spec"]["updateStrategy"].update(type="Rolling"),
        "Rolling",
    ),
    Break(
        "negative replicas", "SandboxWarmPool", lambda o: o["spec"].update(replicas=-1), "minimum"
    ),
    Break(
        "missing pool reference",
        "SandboxClaim",
        lambda o: o["spec"].pop("warmPoolRef"),
        "warmPoolRef: required",
    ),
    Break(
        "v1alpha1 field on v1beta1",
        "SandboxClaim",
        lambda o: o["spec"].update(sandboxTemplateRef={"name": "opsbroker"}),
        "sandboxTemplateRef",
    ),
    Break("unknown secret field", "Secret", lambda o: o.update(stringdata={}), "stringdata"),
    Break(
        "labels as a list",
        "NetworkPolicy",
        lambda o: o["spec"]["podSelector"].update(matchLabels=["app"]),
        "matchLabels",
    ),
    Break("config data as a number", "ConfigMap", lambda o: o["data"].update(x=1), "data.x"),
]


def _problems(kind: str, obj: dict[str, Any]) -> list[str]:
    if kind in CORE:
        return _api_models.problems(obj, CORE[kind])
    _, _, schema = _crd_schema.crd_schema(CRDS / CRD_FILES[kind], "v1beta1")
    found = _crd_schema.problems(obj, schema)
    if kind == "SandboxTemplate":
        found += _api_models.problems(obj["spec"]["podTemplate"], "V1PodTemplateSpec")
    return found


@pytest.mark.parametrize("case", BREAKS, ids=lambda b: b.name)
def test_a_broken_manifest_is_refused(case: Break) -> None:
    assert _problems(case.kind, OBJECTS[case.kind]) == []
    broken = copy.deepcopy(OBJECTS[case.kind])
    case.change(broken)
    found = _problems(case.kind, broken)
    assert any(case.complaint in problem for problem in found), found


@pytest.mark.parametrize("field", ["portz", "containerPort"])
def test_both_checks_refuse_a_broken_pod_template(field: str) -> None:
    """The pod template is checked twice: by the CRD's copy of PodSpec and by the API models."""
    broken = copy.deepcopy(OBJECTS["SandboxTemplate"])
    if field == "portz":
        _container(broken)["portz"] = []
    else:
        _container(broken)["ports"][0]["containerPort"] = "8080"
    _, _, schema = _crd_schema.crd_schema(CRDS / CRD_FILES["SandboxTemplate"], "v1beta1")
    assert any(field in p for p in _crd_schema.problems(broken, schema))
    assert any(
        field in p for p in _api_models.problems(broken["spec"]["podTemplate"], "V1PodTemplateSpec")
    )


def test_a_pod_template_without_a_container_name_does_not_load() -> None:
    broken = copy.deepcopy(OBJECTS["SandboxTemplate"]["spec"]["podTemplate"])
    del broken["spec"]["containers"][0]["name"]
    with pytest.raises(ValueError, match="name"):
        _api_models.load(broken, "V1PodTemplateSpec")
