"""Mutual TLS on both sandboxd listeners: the client certificate's SPIFFE ID is the principal,
and an allow-list admits only the router's identity.

The CA and every certificate are made here (``cryptography``, which asyncssh already needs).
The broker runs as a user runs it, ``opsbroker serve --sandboxd --tls-*``, on loopback; the
clients are ``http.client`` over TLS and gRPC with the SDK's own ProcessService stubs.
"""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import json
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from broker._spiffe import SpiffeAllowList, SpiffeId, parse_spiffe_id

from .conftest import REPO, Sandboxd, start_broker, stop_broker

ROUTER = "spiffe://cluster.local/ns/agent-sandbox-system/sa/sandbox-router"
STRANGER = "spiffe://cluster.local/ns/default/sa/curious-pod"
FLEET_DOMAIN = "spiffe://fleet.example"  # every workload of this trust domain is admitted
FLEET_WORKER = "spiffe://fleet.example/ns/jobs/sa/worker"


@dataclass(frozen=True)
class Pki:
    directory: Path

    def path(self, name: str) -> str:
        return str(self.directory / name)


def _make_pki(directory: Path) -> Pki:
    """ca.pem; server.pem/.key for 127.0.0.1; a client pair per identity below."""
    now = datetime.datetime.now(datetime.UTC)
    pem = serialization.Encoding.PEM

    def issue(
        common_name: str | None,
        sans: Sequence[x509.GeneralName],
        issuer: tuple[ec.EllipticCurvePrivateKey, x509.Name] | None,
        key: ec.EllipticCurvePrivateKey,
    ) -> x509.Certificate:
        attrs = (
            [] if common_name is None else [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        )
        subject = x509.Name(attrs)
        signer, issuer_name = issuer or (key, subject)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), True)
        )
        if sans:  # critical when the subject is empty, as RFC 5280 (and X.509-SVIDs) have it
            builder = builder.add_extension(
                x509.SubjectAlternativeName(sans), critical=common_name is None
            )
        return builder.sign(signer, hashes.SHA256())

    def write(name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
        (directory / f"{name}.pem").write_bytes(cert.public_bytes(pem))
        (directory / f"{name}.key").write_bytes(
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = issue("test fleet CA", [], None, ca_key)
    (directory / "ca.pem").write_bytes(ca.public_bytes(pem))
    uri = x509.UniformResourceIdentifier
    clients: dict[str, tuple[str | None, list[x509.GeneralName]]] = {
        "server": ("127.0.0.1", [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
        "router": (None, [uri(ROUTER)]),
        "stranger": (None, [uri(STRANGER)]),
        "worker": (None, [uri(FLEET_WORKER), x509.DNSName("worker.jobs.svc")]),
        "no-uri": ("plain-client", [x509.DNSName("plain.example")]),
        "two-uris": (None, [uri(ROUTER), uri("https://router.example/")]),
    }
    for name, (common_name, sans) in clients.items():
        key = ec.generate_private_key(ec.SECP256R1())
        write(name, issue(common_name, sans, (ca_key, ca.subject), key), key)
    return Pki(directory)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[Sandboxd, Pki]]:
    """A broker with mutual TLS that admits the router and the fleet.example trust domain."""
    pki = _make_pki(tmp_path)
    extra = [
        "--tls-cert", pki.path("server.pem"), "--tls-key", pki.path("server.key"),
        "--tls-client-ca", pki.path("ca.pem"),
        "--tls-client-spiffe-id", ROUTER, "--tls-client-spiffe-id", FLEET_DOMAIN,
        "--audit-log", str(tmp_path / "audit.jsonl"),
    ]  # fmt: skip
    broker = start_broker(tmp_path, extra=extra)
    try:
        yield broker, pki
    finally:
        stop_broker(broker)


def _https(
    broker: Sandboxd, pki: Pki, client: str | None, method: str, target: str, body: bytes = b""
) -> tuple[int, bytes]:
    context = ssl.create_default_context(cafile=pki.path("ca.pem"))
    if client is not None:
        context.load_cert_chain(pki.path(f"{client}.pem"), pki.path(f"{client}.key"))
    host, port = broker.http.rsplit(":", 1)
    conn = http.client.HTTPSConnection(host, int(port), context=context, timeout=30)
    try:
        # The broker's token too: under mutual TLS it must not stand in for a certificate.
        conn.request(method, target, body=body, headers=broker.headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _execute(broker: Sandboxd, pki: Pki, client: str | None, command: list[str]) -> Any:
    from k8s_agent_sandbox.commands._process_stubs import process_pb2, process_pb2_grpc

    ca = Path(pki.path("ca.pem")).read_bytes()
    if client is None:
        credentials = grpc.ssl_channel_credentials(ca)
    else:
        credentials = grpc.ssl_channel_credentials(
            ca,
            Path(pki.path(f"{client}.key")).read_bytes(),
            Path(pki.path(f"{client}.pem")).read_bytes(),
        )
    with grpc.secure_channel(broker.grpc, credentials) as channel:
        stub = process_pb2_grpc.ProcessServiceStub(channel)
        config = process_pb2.ProcessConfig(command=command)
        return stub.Execute(process_pb2.ExecuteRequest(config=config), timeout=30)


def _audit(broker: Sandboxd) -> list[dict[str, Any]]:
    lines = (broker.root.parent / "audit.jsonl").read_text().splitlines()
    return [event for event in map(json.loads, lines) if event.get("type") == "op"]


def test_a_spiffe_certificate_is_admitted_and_audited_under_its_id(
    fleet: tuple[Sandboxd, Pki],
) -> None:
    broker, pki = fleet
    assert _https(broker, pki, "router", "PUT", "/v1/files/notes.txt", b"hello")[0] == 204
    assert _https(broker, pki, "router", "GET", "/v1/files/notes.txt") == (200, b"hello")
    result = _execute(broker, pki, "router", ["sh", "-c", "cat notes.txt; touch ran"])
    assert result.exit_code == 0 and result.stdout == b"hello"
    assert (broker.root / "ran").exists()
    # A trust-domain entry admits any workload of the domain (this one has a DNS SAN too).
    assert _https(broker, pki, "worker", "GET", "/v1/files/notes.txt") == (200, b"hello")
    events = _audit(broker)
    by_router = [e for e in events if e["principal"] == ROUTER]
    assert {e["op"] for e in by_router} >= {"write_file", "read_file", "start_process"}, events
    assert all(e["decision"] == "allow" and e["transport"] == "sandboxd" for e in by_router)
    assert any(e["principal"] == FLEET_WORKER and e["op"] == "read_file" for e in events)


def test_no_client_certificate_is_refused_with_what_to_send(fleet: tuple[Sandboxd, Pki]) -> None:
    broker, pki = fleet
    status, body = _https(broker, pki, None, "PUT", "/v1/files/planted.txt", b"x")
    assert status == 401, body
    error = json.loads(body)
    assert error["code"] == "UNAUTHENTICATED"
    assert "requires a client certificate" in error["message"], error
    assert "tls_client_ca" in error["message"], error
    assert not (broker.root / "planted.txt").exists()
    # gRPC refuses in the handshake (grpcio cannot ask for a certificate without requiring it).
    with pytest.raises(grpc.RpcError) as caught:
        _execute(broker, pki, None, ["touch", "ran"])
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert not (broker.root / "ran").exists()
    refused = [e for e in _audit(broker) if e["decision"] == "deny"]
    assert [(e["op"], e["code"], e["principal"]) for e in refused] == [
        ("PUT /v1/files/planted.txt", "unauthenticated", None)
    ]
    # Probes carry no certificate: /v1/health still answers over TLS.
    assert _https(broker, pki, None, "GET", "/v1/health")[0] == 200


def test_a_spiffe_id_not_allowed_is_refused_and_audited_as_deny(
    fleet: tuple[Sandboxd, Pki],
) -> None:
    broker, pki = fleet
    status, body = _https(broker, pki, "stranger", "PUT", "/v1/files/planted.txt", b"x")
    assert status == 403, body
    error = json.loads(body)
    assert error["code"] == "PERMISSION_DENIED"
    assert STRANGER in error["message"] and "tls_client_spiffe_ids" in error["message"], error
    with pytest.raises(grpc.RpcError) as caught:
        _execute(broker, pki, "stranger", ["touch", "ran"])
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert STRANGER in (caught.value.details() or "")
    assert not (broker.root / "planted.txt").exists() and not (broker.root / "ran").exists()
    refused = [e for e in _audit(broker) if e["decision"] == "deny"]
    assert len(refused) == 2, refused
    assert all(e["principal"] == STRANGER and e["code"] == "policy_denied" for e in refused)
    assert all(e["transport"] == "sandboxd" for e in refused)
    assert not [e for e in _audit(broker) if e["decision"] == "allow"]


@pytest.mark.parametrize(
    ("client", "reason"),
    [("no-uri", "has no SPIFFE ID"), ("two-uris", "has 2 URI SANs")],
)
def test_a_certificate_without_one_spiffe_uri_san_is_refused(
    fleet: tuple[Sandboxd, Pki], client: str, reason: str
) -> None:
    broker, pki = fleet
    status, body = _https(broker, pki, client, "GET", "/v1/metadata")
    assert status == 401, body
    assert reason in json.loads(body)["message"]
    with pytest.raises(grpc.RpcError) as caught:
        _execute(broker, pki, client, ["touch", "ran"])
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert reason in (caught.value.details() or "")
    assert not (broker.root / "ran").exists()
    refused = [e for e in _audit(broker) if e["decision"] == "deny"]
    assert len(refused) == 2 and all(e["code"] == "unauthenticated" for e in refused), refused


def _serve_fails(tmp_path: Path, *extra: str) -> str:
    """``opsbroker serve --sandboxd`` with ``extra``: it must exit at once; its stderr."""
    (tmp_path / "ws").mkdir(exist_ok=True)
    args = [sys.executable, "-m", "opsbroker", "serve", "--root", str(tmp_path / "ws"),
            "--grpc", "127.0.0.1:0", "--sandboxd-grpc", "127.0.0.1:0",
            "--sandboxd-http", "127.0.0.1:0", *extra]  # fmt: skip
    env = {"PYTHONPATH": f"{REPO}:{REPO / 'proto'}", "XDG_STATE_HOME": str(tmp_path / "state")}
    done = subprocess.run(
        args, capture_output=True, text=True, timeout=60, cwd=tmp_path, env={**os.environ, **env}
    )
    assert done.returncode != 0, done.stdout
    return done.stderr


def test_serve_refuses_a_malformed_spiffe_id_and_one_without_mutual_tls(tmp_path: Path) -> None:
    pki = _make_pki(tmp_path)
    tls = ["--tls-cert", pki.path("server.pem"), "--tls-key", pki.path("server.key")]
    stderr = _serve_fails(
        tmp_path, *tls, "--tls-client-ca", pki.path("ca.pem"),
        "--tls-client-spiffe-id", "spiffe://Cluster.Local/ns/x",
    )  # fmt: skip
    assert "'spiffe://Cluster.Local/ns/x' is not a SPIFFE ID" in stderr, stderr
    stderr = _serve_fails(tmp_path, *tls, "--tls-client-spiffe-id", ROUTER)
    assert "tls_client_spiffe_ids needs mutual TLS: set tls_client_ca" in stderr, stderr


def test_spiffe_ids_parse_by_the_spec() -> None:
    assert parse_spiffe_id(ROUTER) == SpiffeId(
        "cluster.local", "/ns/agent-sandbox-system/sa/sandbox-router"
    )
    assert str(parse_spiffe_id(ROUTER)) == ROUTER
    assert parse_spiffe_id("spiffe://fleet.example") == SpiffeId("fleet.example", "")
    bad = {
        "https://cluster.local/ns/a": "does not start with",
        "spiffe:///ns/a": "has no trust domain",
        "spiffe://Cluster.local/ns/a": "trust domain",
        "spiffe://cluster.local:8443/ns/a": "no port",
        "spiffe://user@cluster.local/ns/a": "trust domain",
        "spiffe://cluster.local/ns//a": "segment ''",
        "spiffe://cluster.local/ns/a/": "segment ''",
        "spiffe://cluster.local/ns/../a": "segment '..'",
        "spiffe://cluster.local/ns/./a": "segment '.'",
        "spiffe://cluster.local/ns/a?x=1": "no query",
        "spiffe://cluster.local/ns/a#f": "fragment",
        "spiffe://cluster.local/ns/%2e%2e": "percent-encoding",
        "spiffe://cluster.local/" + "a" * 2048: "longer than 2048",
    }
    for text, reason in bad.items():
        with pytest.raises(ValueError) as caught:
            parse_spiffe_id(text)
        assert reason in str(caught.value), (text, str(caught.value))


def test_the_allow_list_admits_ids_and_trust_domains_exactly() -> None:
    allow = SpiffeAllowList.parse([ROUTER, FLEET_DOMAIN])
    admitted = [ROUTER, FLEET_WORKER, "spiffe://fleet.example/anything"]
    refused = [
        STRANGER,
        ROUTER + "/child",  # an ID names one workload, not a subtree
        "spiffe://cluster.local/ns/agent-sandbox-system/sa/sandbox-route",
        "spiffe://evil.fleet.example/ns/jobs/sa/worker",  # not a suffix match
        "spiffe://fleet.example.evil/ns/jobs/sa/worker",
        "spiffe://cluster.local",
    ]
    assert [allow.admits(parse_spiffe_id(i)) for i in admitted] == [True] * len(admitted)
    assert [allow.admits(parse_spiffe_id(i)) for i in refused] == [False] * len(refused)
    with pytest.raises(ValueError, match="'spiffe://' is not a SPIFFE ID"):
        SpiffeAllowList.parse(["spiffe://"])
