"""What a client is told when it cannot get in: nothing listening is said at once (not after the
reconnect wait), and a mutual-TLS broker's refusal names the missing client certificate, while
the broker itself prints none of gRPC core's handshake log lines."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agent_side import connect
from operations import Unauthenticated, Unavailable

from ._run import REPO, SERVE_READY_S, cli_env, closed_port

WAIT_S = 60.0  # the reconnect wait given to the client: an answer within BOUND_S did not use it
BOUND_S = 30.0


async def test_a_refused_connection_is_reported_at_once() -> None:
    url = f"grpc://127.0.0.1:{closed_port()}"
    backend = connect(url, token="t", reconnect_wait=WAIT_S)
    async with asyncio.timeout(BOUND_S):
        with pytest.raises(Unavailable, match="nothing listens there"):
            await backend.__aenter__()
    await backend.aclose()


def _certificates(directory: Path) -> None:
    """A CA and a server certificate for 127.0.0.1 signed by it: ca.pem, server.pem/.key."""
    now = datetime.datetime.now(datetime.UTC)

    def make(name: str, issuer_key: ec.EllipticCurvePrivateKey | None, issuer: x509.Name | None,
             key: ec.EllipticCurvePrivateKey, ca: bool) -> x509.Certificate:  # fmt: skip
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer or subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            builder = builder.add_extension(san, critical=False)
        return builder.sign(issuer_key or key, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = make("test-ca", None, None, ca_key, True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = make("127.0.0.1", ca_key, ca.subject, server_key, False)
    pem = serialization.Encoding.PEM
    (directory / "ca.pem").write_bytes(ca.public_bytes(pem))
    (directory / "server.pem").write_bytes(server.public_bytes(pem))
    (directory / "server.key").write_bytes(
        server_key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


@contextmanager
def _serving_mtls(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """``opsbroker serve`` with mutual TLS; yields its address and, after it stopped, its
    stderr lines (in the list, filled on exit)."""
    _certificates(tmp_path)
    (tmp_path / "ws").mkdir()
    (tmp_path / "broker.toml").write_text(
        'root = "ws"\ngrpc = "127.0.0.1:0"\ntls_cert = "server.pem"\ntls_key = "server.key"\n'
        'tls_client_ca = "ca.pem"\n'
    )
    out_path = tmp_path / "serve.out"
    stderr: list[str] = []
    with out_path.open("w") as out, subprocess.Popen(
        [sys.executable, "-m", "opsbroker", "serve", "--config", str(tmp_path / "broker.toml")],
        stdout=out, stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=REPO,
    ) as proc:  # fmt: skip
        try:
            address = None
            deadline = time.monotonic() + SERVE_READY_S
            while address is None and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.1)
                for line in out_path.read_text().splitlines():
                    if " on grpc " in line:
                        address = line.rsplit(" ", 1)[1]
            assert address is not None, out_path.read_text()
            yield address, stderr
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=BOUND_S)
            stderr.extend(err.splitlines())


async def test_mutual_tls_without_a_client_certificate(tmp_path: Path) -> None:
    with _serving_mtls(tmp_path) as (address, stderr):
        backend = connect(f"grpcs://{address}", ca_file=str(tmp_path / "ca.pem"),
                          reconnect_wait=WAIT_S)  # fmt: skip
        async with asyncio.timeout(BOUND_S):
            with pytest.raises(Unauthenticated, match="requires a client certificate"):
                await backend.__aenter__()
        await backend.aclose()
    assert stderr == [], stderr  # no "Handshake failed ... PEER_DID_NOT_RETURN_A_CERTIFICATE"
