"""The real client, ``k8s-agent-sandbox``, pointed at a loopback broker without a cluster.

``SandboxdInClusterConnectionConfig(mode="in-cluster-pod-ip")`` makes the SDK's connector dial
``http://POD_IP:rest_port`` and ``POD_IP:grpc_port`` directly; handing it ``get_pod_ip`` that
answers ``127.0.0.1`` (and no Kubernetes helper: that strategy never uses one) aims it at the
broker's loopback listeners. The SDK has no setting for extra headers on a sandboxd connection,
so the token is added the way a deployment's sidecar proxy would: a default header on the
connector's ``requests`` sessions and a client interceptor on its gRPC channel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from k8s_agent_sandbox.commands.command_executor import CommandExecutor
from k8s_agent_sandbox.connector import SandboxConnector
from k8s_agent_sandbox.files.filesystem import Filesystem
from k8s_agent_sandbox.models import SandboxdInClusterConnectionConfig

from .conftest import Sandboxd


class _Token(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):  # type: ignore[misc]
    def __init__(self, token: str) -> None:
        self._token = token

    def _details(self, details: Any) -> Any:
        metadata = [*(details.metadata or ()), ("x-opsbroker-token", self._token)]
        return details._replace(metadata=metadata)

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        return continuation(self._details(details), request)


def connector(broker: Sandboxd, *, token: str | None = None) -> SandboxConnector:
    """The SDK's connector, aimed at ``broker``, sending ``token`` (default: the broker's)."""
    rest_port = int(broker.http.rsplit(":", 1)[1])
    grpc_port = int(broker.grpc.rsplit(":", 1)[1])
    config = SandboxdInClusterConnectionConfig(
        mode="in-cluster-pod-ip", rest_port=rest_port, grpc_port=grpc_port
    )
    conn = SandboxConnector(
        "sb-1", "default", config, k8s_helper=None,  # type: ignore[arg-type]
        get_pod_ip=lambda: "127.0.0.1",
    )  # fmt: skip
    value = broker.token if token is None else token
    for session in (conn.session, conn._no_retry_session):
        session.headers["X-Opsbroker-Token"] = value
    plain = conn.grpc_channel
    wrapped: dict[int, grpc.Channel] = {}

    def channel() -> grpc.Channel:
        inner = plain()
        if id(inner) not in wrapped:
            wrapped.clear()
            wrapped[id(inner)] = grpc.intercept_channel(inner, _Token(value))
        return wrapped[id(inner)]

    conn.grpc_channel = channel  # type: ignore[method-assign]
    return conn


def commands(conn: SandboxConnector) -> CommandExecutor:
    return CommandExecutor(conn, None, "test")


def files(conn: SandboxConnector) -> Filesystem:
    return Filesystem(conn, None, "test")
