"""docs/kubernetes/*.yaml, offline: core objects against the ``kubernetes`` API models, the
agent-sandbox objects against their CRD schemas (tests/data/agent-sandbox/), the pod template
against both, and the cross-references a cluster would only reveal at run time (names, labels,
ports, mounts, the broker's own configuration). What needs a cluster is in docs/kubernetes.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from opsbroker.cli import build_parser

from broker import BrokerConfig, TokenTable
from operations import InvalidArgument, PermissionDenied, SandboxPolicy, load_policy

from . import _api_models, _crd_schema

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "docs" / "kubernetes"
CRDS = ROOT / "tests" / "data" / "agent-sandbox"
CORE = {"Secret": "V1Secret", "ConfigMap": "V1ConfigMap", "NetworkPolicy": "V1NetworkPolicy"}
CRD_FILES = {
    "SandboxTemplate": "extensions.agents.x-k8s.io_sandboxtemplates.yaml",
    "SandboxClaim": "extensions.agents.x-k8s.io_sandboxclaims.yaml",
    "SandboxWarmPool": "extensions.agents.x-k8s.io_sandboxwarmpools.yaml",
}


def _objects() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            assert obj["kind"] not in found, f"{path.name}: a second {obj['kind']}"
            found[obj["kind"]] = obj
    return found


OBJECTS = _objects()
TEMPLATE = OBJECTS["SandboxTemplate"]
POD = TEMPLATE["spec"]["podTemplate"]
BROKER = next(c for c in POD["spec"]["containers"] if c["name"] == "opsbroker")


def _args(container: dict[str, Any]) -> dict[str, str]:
    """``--flag=value`` arguments as a map (the template writes every flag so)."""
    return dict(arg.partition("=")[::2] for arg in container["args"] if arg.startswith("--"))


def test_every_object_the_fleet_needs_is_there() -> None:
    assert set(OBJECTS) == set(CORE) | set(CRD_FILES)


@pytest.mark.parametrize("kind", sorted(CORE))
def test_core_objects_match_the_kubernetes_api_models(kind: str) -> None:
    obj = OBJECTS[kind]
    model = _api_models.load(obj, CORE[kind])
    assert model.kind == kind and model.metadata.name


@pytest.mark.parametrize("kind", sorted(CRD_FILES))
def test_agent_sandbox_objects_match_their_crd_schema(kind: str) -> None:
    api_version, crd_kind, schema = _crd_schema.crd_schema(CRDS / CRD_FILES[kind], "v1beta1")
    obj = OBJECTS[kind]
    assert (obj["apiVersion"], obj["kind"]) == (api_version, crd_kind)
    assert _crd_schema.problems(obj, schema) == []
    assert _api_models.load(obj["metadata"], "V1ObjectMeta").name


def test_the_pod_template_matches_the_kubernetes_api_models() -> None:
    pod = _api_models.load(POD, "V1PodTemplateSpec")
    assert [c.name for c in pod.spec.containers] == ["opsbroker", "audit-log", "workload"]


def test_claim_pool_and_template_refer_to_each_other() -> None:
    pool = OBJECTS["SandboxWarmPool"]
    assert pool["spec"]["sandboxTemplateRef"]["name"] == TEMPLATE["metadata"]["name"]
    assert OBJECTS["SandboxClaim"]["spec"]["warmPoolRef"]["name"] == pool["metadata"]["name"]


def test_volumes_mounts_secret_and_config_refer_to_each_other() -> None:
    spec = POD["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    for container in spec["containers"] + spec["initContainers"]:
        for mount in container.get("volumeMounts", []):
            assert mount["name"] in volumes, (container["name"], mount["name"])
    assert volumes["token-secret"]["secret"]["secretName"] == OBJECTS["Secret"]["metadata"]["name"]
    assert volumes["config"]["configMap"]["name"] == OBJECTS["ConfigMap"]["metadata"]["name"]
    assert volumes["tokens"]["emptyDir"]["medium"] == "Memory"
    # Only the token copier and the broker see the tokens; the workload does not.
    seeing = {
        c["name"]
        for c in spec["containers"] + spec["initContainers"]
        for m in c.get("volumeMounts", [])
        if m["name"] in {"tokens", "token-secret"}
    }
    assert seeing == {"copy-tokens", "opsbroker"}


def test_every_container_is_locked_down_and_limited() -> None:
    spec = POD["spec"]
    pod_security = spec["securityContext"]
    assert pod_security["runAsNonRoot"] is True and pod_security["runAsUser"] == 10001
    assert pod_security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False and spec["shareProcessNamespace"] is False
    for container in spec["containers"] + spec["initContainers"]:
        security = container["securityContext"]
        assert security["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert security["allowPrivilegeEscalation"] is False, container["name"]
        assert security["readOnlyRootFilesystem"] is True, container["name"]
        assert {"cpu", "memory"} <= set(container["resources"]["limits"]), container["name"]
        assert {"cpu", "memory"} <= set(container["resources"]["requests"]), container["name"]


def test_the_probes_ask_the_broker_over_both_of_its_ports() -> None:
    ports = {p["name"]: p["containerPort"] for p in BROKER["ports"]}
    assert ports == {"files": 8080, "process": 9090}
    assert BROKER["readinessProbe"]["httpGet"] == {"path": "/v1/health", "port": "files"}
    assert BROKER["livenessProbe"]["grpc"] == {"port": 9090}
    args = _args(BROKER)
    assert args["--sandboxd-http"] == "0.0.0.0:8080" and args["--sandboxd-grpc"] == "0.0.0.0:9090"


def test_the_network_policy_admits_only_the_router_on_the_brokers_ports() -> None:
    policy = OBJECTS["NetworkPolicy"]["spec"]
    assert TEMPLATE["spec"]["networkPolicyManagement"] == "Unmanaged"
    labels = POD["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    (rule,) = policy["ingress"]
    (peer,) = rule["from"]
    assert peer["podSelector"] == {"matchLabels": {"app": "sandbox-router"}}
    assert "namespaceSelector" in peer and "ipBlock" not in peer
    assert {p["port"] for p in rule["ports"]} == {p["containerPort"] for p in BROKER["ports"]}
    blocked = {
        cidr for rule in policy["egress"] for to in rule["to"] for cidr in to["ipBlock"]["except"]
    }
    assert {"10.0.0.0/8", "169.254.0.0/16"} <= blocked  # no cluster network, no metadata server


def test_the_broker_arguments_are_serve_flags() -> None:
    assert BROKER["args"][0] == "serve"
    known, unknown = build_parser().parse_known_args(BROKER["args"])
    assert unknown == []
    assert known.root == Path("/workspace")
    assert known.token_file == Path("/run/opsbroker/tokens")
    assert known.sandboxd_http == ["0.0.0.0:8080"] and known.sandboxd_grpc == ["0.0.0.0:9090"]


def test_the_config_map_is_a_broker_config_and_a_policy(tmp_path: Path) -> None:
    data = OBJECTS["ConfigMap"]["data"]
    args = _args(BROKER)
    mounted = Path(args["--config"]).parent
    for name, text in data.items():
        (tmp_path / name).write_text(text)
        assert (mounted / name).as_posix() in args.values(), name
    config = BrokerConfig.from_toml(tmp_path / "broker.toml", root=tmp_path)
    assert config.health_without_token is True  # the kubelet's gRPC probe has no token
    policy = load_policy(tmp_path / "policy.toml")
    assert policy.sandbox.mode == "landlock"
    # Under Landlock a command reads only sandbox.read and the root: the token and the audit
    # log are mounted outside both.
    for path in (args["--token-file"], args["--audit-log"]):
        assert not any(Path(path).is_relative_to(d) for d in policy.sandbox.read), path
        assert not Path(path).is_relative_to(args["--root"]), path
    assert SandboxPolicy().read == policy.sandbox.read


def test_the_shipped_secret_holds_no_usable_token(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(OBJECTS["Secret"]["stringData"]["tokens"])
    tokens.chmod(0o400)
    with pytest.raises(InvalidArgument, match="no token in the file"):
        TokenTable.load(tokens)


def test_the_copied_token_file_passes_the_brokers_mode_check(tmp_path: Path) -> None:
    """The kubelet mounts the Secret 0440 with fsGroup; copy-tokens installs it 0400."""
    (init,) = POD["spec"]["initContainers"]
    assert init["command"][:3] == ["install", "-m", "0400"]
    assert init["command"][-1] == _args(BROKER)["--token-file"]
    secret_file = tmp_path / "secret"
    secret_file.write_text("t0ken router\n")
    secret_file.chmod(0o440)
    with pytest.raises(PermissionDenied, match="chmod 600"):
        TokenTable.load(secret_file)
    copied = tmp_path / "copied"
    copied.write_text(secret_file.read_text())
    copied.chmod(int(init["command"][2], 8))
    assert TokenTable.load(copied).principal("t0ken") == "router"
