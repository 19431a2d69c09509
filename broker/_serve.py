"""Running a broker: :class:`BrokerConfig`, :class:`BrokerServer` and :func:`serve`.

``BrokerServer`` puts a backend (by default the broker core over ``config.root``) behind the
front-ends the config names (gRPC on TCP and/or Unix-socket addresses, SSH), plus any
:class:`Frontend` handed in (``opsbroker serve --mcp-http`` adds MCP over HTTP this way, so the
broker imports nothing of the agent side). Tests and embedders start it in process
(``async with BrokerServer(config) as server: server.addresses``); the ``opsbroker serve``
command does the same until SIGINT or SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import logging
import os
import re
import socket
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

import grpc
import grpc.aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc
from opsbroker.v1 import broker_pb2_grpc as pb_grpc
from opsbroker.v1.codec import MAX_MESSAGE_BYTES
from pydantic import BaseModel, ConfigDict, Field, field_validator

from operations import Backend, InvalidArgument, RecordingBackend, load_policy

from ._auth import TokenTable
from ._core import Broker
from ._frontends._service import broker_version, capabilities_of
from ._frontends.grpc import SERVICE_NAME, AuthenticatedServer, Authenticator, BrokerServicer
from ._guard import Enforcement
from ._spiffe import SpiffeAllowList
from ._tls import MutualTLS, ServerTLS

__all__ = [
    "DEFAULT_GRPC_ADDRESS",
    "SANDBOXD_GRPC_ADDRESS",
    "SANDBOXD_HTTP_ADDRESS",
    "BrokerConfig",
    "BrokerServer",
    "Frontend",
    "default_token_file",
    "is_loopback_address",
    "serve",
]

DEFAULT_GRPC_ADDRESS = "127.0.0.1:7443"  # loopback only: nothing off this machine can reach it
SANDBOXD_GRPC_ADDRESS = "127.0.0.1:9090"  # the sandboxd spec's ProcessService port, on loopback
SANDBOXD_HTTP_ADDRESS = "127.0.0.1:8080"  # the sandboxd spec's REST port, on loopback

MAX_RECEIVE_MESSAGE_BYTES = 4 * 1024 * 1024  # requests carry 64 KiB chunks; 4 MiB is ample
MAX_SEND_MESSAGE_BYTES = MAX_MESSAGE_BYTES  # one search match holds a whole line, however long
KEEPALIVE_TIME_MS = 20_000  # ping an idle connection this often, to notice a vanished client
KEEPALIVE_TIMEOUT_MS = 10_000  # ...and drop it (cancelling its calls) if the ping is not answered
MIN_CLIENT_PING_INTERVAL_MS = 5_000  # clients may ping us this often without being cut off

CLEANUP_TIMEOUT_S = 5.0  # at stop, for helper processes of cancelled calls to be reaped

_HEALTH_METHODS = ("/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch")

_log = logging.getLogger("opsbroker.serve")


def default_token_file(root: str | os.PathLike[str] | None = None) -> Path:
    """Where a broker keeps its generated tokens: ``$XDG_STATE_HOME/opsbroker/tokens``, or for
    a broker of ``root``, ``.../opsbroker/tokens-<root's name>-<hash of its real path>``.

    One file per root, so the token of one workspace's broker does not open another's. Never
    inside the workspace root, where the commands the broker runs could read it.
    """
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    if root is None:
        return Path(state) / "opsbroker" / "tokens"
    real = os.path.realpath(root)
    name = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(real))[:40] or "root"
    digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:12]
    return Path(state) / "opsbroker" / f"tokens-{name}-{digest}"


class BrokerConfig(BaseModel):
    """Everything a broker needs to start. Loaded from TOML by :meth:`from_toml`.

    ``grpc`` lists listen addresses (a single string is a list of one): ``HOST:PORT`` (port 0
    picks a free one, 65535 is the highest), ``[::1]:PORT``, ``unix:/path/to.sock``. TCP needs authentication: bearer tokens from ``token_file`` (created,
    mode 0600, with one fresh token when missing; default :func:`default_token_file` of the root) or mutual
    TLS (``tls_client_ca``). A Unix socket is guarded by its file permissions (0600). A TCP
    address that is not loopback needs authentication configured on purpose: an explicit
    ``token_file`` or ``tls_client_ca`` (a token generated behind the operator's back is for
    loopback only).

    ``sandboxd_grpc`` and ``sandboxd_http`` (``HOST:PORT``; empty: off) serve the sandboxd
    surface (docs/sandboxd.md): tokens from the same ``token_file``, the same TLS files, the
    same rule for addresses that are not loopback.

    With mutual TLS a client certificate's SPIFFE ID (its ``spiffe://`` URI SAN) is the
    principal; ``tls_client_spiffe_ids`` (SPIFFE IDs, or ``spiffe://TRUST-DOMAIN`` for a whole
    domain) admits only those, on every TCP listener (:mod:`broker._tls`).
    """

    model_config = ConfigDict(extra="forbid")

    root: Path
    grpc: list[str] = Field(default_factory=lambda: [DEFAULT_GRPC_ADDRESS])
    token_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    tls_client_spiffe_ids: list[str] = Field(default_factory=list)
    """With ``tls_client_ca``: the SPIFFE IDs (or trust domains) admitted; empty admits all."""
    policy: Path | None = None
    audit_log: Path | None = None
    health_without_token: bool = False
    max_concurrent_streams: int | None = None
    """Streams one connection may hold open; default one more than ``max_concurrent_calls``.
    The client runs each concurrent call on a stream of its own, and grpc holds a call past this
    limit, silently, until a stream ends: above the call limit, the call past that is refused
    (``RESOURCE_EXHAUSTED``) instead of stalled."""
    max_concurrent_calls: int = 4096
    shutdown_grace: float = 5.0
    ssh: list[str] = Field(default_factory=list)
    ssh_authorized_keys: Path | None = None
    ssh_host_key: Path | None = None
    ssh_command_timeout: float | None = None
    record: Path | None = None
    """Record every call to this cassette (``opsbroker serve --record FILE``)."""
    sandboxd_grpc: list[str] = Field(default_factory=list)
    sandboxd_http: list[str] = Field(default_factory=list)

    @field_validator("tls_client_spiffe_ids")
    @classmethod
    def _spiffe_ids(cls, value: list[str]) -> list[str]:
        """Each entry parses as a SPIFFE ID, so a typo fails at start, not at every call."""
        SpiffeAllowList.parse(value)
        return value

    @field_validator("grpc", "ssh", mode="before")
    @classmethod
    def _one_address_or_a_list(cls, value: Any) -> Any:
        """``grpc = "127.0.0.1:7443"`` means a list of that one address (as docs/grpc.md shows)."""
        return [value] if isinstance(value, str) else value

    @classmethod
    def from_toml(cls, path: Path, **overrides: Any) -> BrokerConfig:
        """Read ``path`` (TOML; relative paths in it are relative to the file), then apply
        ``overrides`` (e.g. from the command line; ``None`` values are ignored)."""
        data = tomllib.loads(path.read_text())
        base = path.parent
        for key in (
            "root",
            "token_file",
            "tls_cert",
            "tls_key",
            "tls_client_ca",
            "ssh_authorized_keys",
            "ssh_host_key",
            "policy",
            "audit_log",
        ):
            if isinstance(data.get(key), str):
                data[key] = str(base / data[key])
        data.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(data)


def _is_unix(address: str) -> bool:
    return address.startswith("unix:")


def is_loopback_address(address: str) -> bool:
    """Whether ``address`` (``HOST:PORT``) can only be reached from this machine: a loopback IP
    literal (``127.0.0.0/8``, ``[::1]``) or ``localhost``. Anything else, a wildcard, a host name
    or an address form we do not parse included, counts as reachable from the network."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return False
    host = host.removeprefix("[").removesuffix("]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


MAX_PORT = 65535  # TCP; gRPC would otherwise take 99999 modulo 65536 and listen on 34463


def parse_tcp_address(address: str, *, what: str = "address") -> tuple[str, int]:
    """Split a TCP listen address, ``HOST:PORT``, ``[V6]:PORT`` or ``:PORT`` (every interface).

    Checked before anything binds, because gRPC and the resolver accept what they should not:
    a port above 65535 wraps around, and a bare ``localhost`` has no port at all.

    Raises:
        InvalidArgument: the port is missing, not a number, or outside 0..65535; or the host
            is an IPv6 literal without brackets.
    """
    host, sep, port = address.rpartition(":")
    example = "e.g. '127.0.0.1:7443' or 'localhost:0' (port 0 picks a free one)"
    if not sep:
        raise InvalidArgument("serve", address, f"a {what} is HOST:PORT, {example}")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise InvalidArgument(
            "serve", address, f"write an IPv6 {what} in brackets, as in '[::1]:{port}'"
        )
    if not port.isascii() or not port.isdigit():
        raise InvalidArgument("serve", address, f"the port {port!r} is not a number; {example}")
    if int(port) > MAX_PORT:
        raise InvalidArgument(
            "serve", address, f"the port {int(port)} is out of range (0 to {MAX_PORT})"
        )
    return host.removeprefix("[").removesuffix("]"), int(port)


def bind_error(address: str) -> OSError | None:
    """Why the TCP ``address`` (``HOST:PORT``) cannot be listened on now, or ``None``.

    Asked before gRPC binds, because gRPC reports a failed bind only as a generic message plus a
    log line on stderr.
    """
    host, _, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    try:
        infos = socket.getaddrinfo(host or None, int(port), type=socket.SOCK_STREAM)
    except (OSError, ValueError) as exc:
        return exc if isinstance(exc, OSError) else OSError(str(exc))
    error: OSError | None = None
    for family, kind, proto, _name, sockaddr in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
            try:
                probe.bind(sockaddr)
            except OSError as exc:
                error = error or exc
                continue
        return None  # gRPC listens if it can bind any of the host's addresses
    return error


def _unix_path(address: str) -> str:
    rest = address.removeprefix("unix:")
    return rest[2:] if rest.startswith("//") else rest


class Frontend(Protocol):
    """A front-end started with a :class:`BrokerServer`, serving its core its own way.

    It reaches the core only through :meth:`BrokerServer.guarded` (the policy and audit every
    front-end gets), authenticates with :meth:`BrokerServer.frontend_tokens` and audits the
    callers it turns away with :meth:`BrokerServer.record_refusal`.
    """

    async def start(self, broker: BrokerServer) -> list[str]:
        """Listen; return what it serves on, one ``KIND ADDRESS`` each (``mcp-http http://...``).

        Raises:
            InvalidArgument: it cannot listen, or its address is not safe as configured.
        """
        ...

    async def stop(self, grace: float) -> None:
        """Stop listening; give running calls ``grace`` seconds, then cancel them."""
        ...


class BrokerServer:
    """A broker serving ``backend`` (default: the core over ``config.root``) on ``config.grpc``.

    Use as ``async with BrokerServer(config) as server:``, or call :meth:`start` and :meth:`stop`.
    After start, :attr:`addresses` holds the bound addresses (real ports) and :attr:`tokens` the
    token table in use (``None`` when no TCP address needs it).
    """

    def __init__(
        self,
        config: BrokerConfig,
        backend: Backend | None = None,
        frontends: Sequence[Frontend] = (),
    ) -> None:
        self.config = config
        self.enforcement: Enforcement | None = None
        self._backend = backend
        self._owns_backend = backend is None
        self._server: grpc.aio.Server | None = None
        self._servicer: BrokerServicer | None = None
        self._health: health.aio.HealthServicer | None = None
        self.addresses: list[str] = []
        self.tokens: TokenTable | None = None
        self.token_file: Path | None = None
        self._ssh: list[Any] = []
        self.ssh_addresses: list[str] = []
        self._frontends = list(frontends)
        self._running = False
        self._started: list[Frontend] = []
        self.frontend_addresses: list[str] = []
        """What the extra front-ends serve on, ``KIND ADDRESS`` each."""
        self._sandboxd: Any = None
        self._tls: ServerTLS | None = None
        self.sandboxd_grpc_addresses: list[str] = []
        self.sandboxd_http_addresses: list[str] = []

    @property
    def principal_model(self) -> str:
        """One line saying who may call, for the operator."""
        parts = []
        if any(not _is_unix(a) for a in self.config.grpc):
            if self.config.tls_client_ca is not None:
                parts.append(f"TCP: mutual TLS, principal = {self._certificate_principal}")
            else:
                tls = "TLS + " if self.config.tls_cert is not None else ""
                parts.append(f"TCP: {tls}bearer token, principal from the tokens file")
        if any(_is_unix(a) for a in self.config.grpc):
            parts.append("Unix socket: principal 'local' (socket mode 0600)")
        if self.config.ssh:
            parts.append("SSH: public key, principal = the key's comment or fingerprint")
        if self.config.sandboxd_grpc or self.config.sandboxd_http:
            if self.config.tls_client_ca is not None:
                parts.append(f"sandboxd: mutual TLS, principal = {self._certificate_principal}")
            else:
                parts.append("sandboxd: x-opsbroker-token header, principal from the tokens file")
        return "; ".join(parts)

    @property
    def _certificate_principal(self) -> str:
        allowed = self.config.tls_client_spiffe_ids
        if allowed:
            return f"the client certificate's SPIFFE ID, one of {', '.join(allowed)}"
        return "the client certificate's SPIFFE ID, else its CN"

    def _mutual_tls(self) -> MutualTLS | None:
        """Who a client certificate names, when the TLS is mutual.

        Raises:
            InvalidArgument: SPIFFE IDs are listed, but the TLS is not mutual.
        """
        ids = self.config.tls_client_spiffe_ids
        if self.config.tls_client_ca is None:
            if ids:
                raise InvalidArgument(
                    "serve",
                    None,
                    "tls_client_spiffe_ids needs mutual TLS: set tls_client_ca (with tls_cert "
                    "and tls_key), the CA whose client certificates carry the SPIFFE IDs",
                )
            return None
        return MutualTLS(SpiffeAllowList.parse(ids) if ids else None)

    async def start(self) -> None:
        """Open the backend and listen on every configured address.

        Raises:
            InvalidArgument: an address cannot be bound, the TLS files are incomplete, or an
                address reachable from the network has no authentication configured.
        """
        config = self.config
        for address in config.grpc:
            if not _is_unix(address):
                parse_tcp_address(address, what="gRPC address")
        for address in config.ssh:
            parse_tcp_address(address, what="SSH address")
        self._check_exposure()
        self._mutual_tls()
        self._server_tls()  # a TLS file that cannot be loaded fails here, before anything runs
        if self._owns_backend or config.policy is not None or config.audit_log is not None:
            # A broker we start ourselves always runs under a policy (the safe default one
            # unless configured); a backend handed in by a test or embedder runs as given.
            # Built first: a policy that requires the sandbox fails here, before anything runs.
            root = str(config.root) if self._backend is None else self._backend.root
            self.enforcement = Enforcement.start(
                load_policy(config.policy), root, audit_log=config.audit_log
            )
        sandbox = self.enforcement.sandbox if self.enforcement is not None else None
        try:
            if self._backend is None:
                policy = self.enforcement.policy if self.enforcement is not None else None
                self._backend = Broker(
                    str(config.root),
                    sandbox=sandbox,
                    exec_policy=policy.exec if policy is not None else None,
                    process_policy=policy.process if policy is not None else None,
                )
            elif sandbox is not None and hasattr(self._backend, "use_sandbox"):
                # A core handed in runs its commands in the policy's sandbox too (never bare).
                self._backend.use_sandbox(sandbox)
            if config.record is not None:
                # Under the policy: refusals are recorded as refusals, and denied files' content
                # is never written (the recorder is told the deny_read globs too).
                policy = self.enforcement.policy if self.enforcement is not None else None
                self._backend = RecordingBackend(
                    self._backend,
                    config.record,
                    deny_read=policy.deny_read if policy is not None else (),
                    source=f"opsbroker serve --root {self._backend.root}",
                )
        except BaseException:
            if self.enforcement is not None:
                self.enforcement.close()  # release the audit lock and the sandbox's temp dir
            raise
        assert self._backend is not None
        self._running = True
        try:
            await self._start_ssh(self._backend)
            await self._start_grpc(self._backend)
            await self._start_sandboxd(self._backend)
            for frontend in self._frontends:
                self.frontend_addresses += await frontend.start(self)
                self._started.append(frontend)
        except BaseException:
            await self.stop(0)
            raise

    @property
    def backend(self) -> Backend:
        """The core every front-end serves (behind :meth:`guarded`); set by :meth:`start`."""
        if self._backend is None:
            raise RuntimeError("the broker is not started")
        return self._backend

    def guarded(self, principal: str, transport: str, peer: str | None = None) -> Backend:
        """The core behind the policy and audit log, for calls by ``principal`` over
        ``transport`` from ``peer`` (the core itself for a backend handed in without a policy)."""
        if self.enforcement is None:
            return self.backend
        return self.enforcement.guard(
            self.backend, principal=principal, transport=transport, peer=peer
        )

    def record_refusal(self, op: str, reason: str, transport: str, peer: str | None) -> None:
        """Audit a caller turned away before any call (bad or missing credentials)."""
        if self.enforcement is not None:
            self.enforcement.record_refusal(
                op, reason, principal=None, transport=transport, peer=peer
            )

    def frontend_tokens(self) -> TokenTable:
        """The bearer tokens of this broker (loaded, or created with one token, as for gRPC)."""
        if self.tokens is None:
            self.token_file = self.config.token_file or default_token_file(self.backend.root)
            self.tokens = TokenTable.load_or_create(self.token_file)
        return self.tokens

    async def _start_grpc(self, backend: Backend) -> None:
        config = self.config
        if not config.grpc:
            return
        needs_auth = any(not _is_unix(a) for a in config.grpc)
        mtls = self._mutual_tls()
        if needs_auth and (config.token_file is not None or mtls is None):
            self.frontend_tokens()
        authenticator = Authenticator(
            self.tokens,
            mtls=mtls,
            public_methods=_HEALTH_METHODS if config.health_without_token else (),
            enforcement=self.enforcement,
        )
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_RECEIVE_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_SEND_MESSAGE_BYTES),
                (
                    "grpc.max_concurrent_streams",
                    config.max_concurrent_streams or config.max_concurrent_calls + 1,
                ),
                ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
                ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.min_ping_interval_without_data_ms", MIN_CLIENT_PING_INTERVAL_MS),
                ("grpc.http2.max_pings_without_data", 0),
                ("grpc.so_reuseport", 0),
            ],
            maximum_concurrent_rpcs=config.max_concurrent_calls,
        )
        self._servicer = BrokerServicer(
            backend, version=broker_version(), enforcement=self.enforcement
        )
        # Every service is added through `authenticated`: each of its methods checks the
        # caller before it runs (health and reflection included).
        authenticated: Any = AuthenticatedServer(server, authenticator)
        pb_grpc.add_BrokerServicer_to_server(self._servicer, authenticated)  # type: ignore[no-untyped-call]
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, authenticated)
        reflection_pb2_grpc.add_ServerReflectionServicer_to_server(  # type: ignore[no-untyped-call]
            reflection.aio.ReflectionServicer(
                (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME)
            ),
            authenticated,
        )
        tls = self._server_tls()
        credentials = None if tls is None else tls.credentials
        for address in config.grpc:
            self.addresses.append(self._bind(server, address, credentials))
        await server.start()
        self._server = server
        for service in ("", SERVICE_NAME):
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)

    async def _start_sandboxd(self, backend: Backend) -> None:
        """Serve the sandboxd surface on ``config.sandboxd_grpc`` and ``config.sandboxd_http``."""
        from ._frontends.sandboxd import SandboxdServer

        config = self.config
        if not (config.sandboxd_grpc or config.sandboxd_http):
            return
        for address in [*config.sandboxd_grpc, *config.sandboxd_http]:
            error = bind_error(address)
            if error is not None:
                raise InvalidArgument("serve", address, f"cannot listen: {error.strerror or error}")
        mtls = self._mutual_tls()
        self._sandboxd = SandboxdServer(
            backend,
            self.frontend_tokens() if config.token_file is not None or mtls is None else None,
            enforcement=self.enforcement,
            health_without_token=config.health_without_token,
            tls=self._server_tls(),
            mtls=mtls,
        )
        await self._sandboxd.start(config.sandboxd_grpc, config.sandboxd_http)
        self.sandboxd_grpc_addresses = list(self._sandboxd.grpc_addresses)
        self.sandboxd_http_addresses = list(self._sandboxd.http_addresses)

    def _check_exposure(self) -> None:
        """Refuse a network-reachable address unless authentication was configured on purpose;
        warn when bearer tokens would cross the network in clear text."""
        config = self.config
        exposed = [a for a in config.grpc if not _is_unix(a) and not is_loopback_address(a)]
        exposed += [
            a for a in (*config.sandboxd_grpc, *config.sandboxd_http) if not is_loopback_address(a)
        ]
        if not exposed:
            return
        if config.token_file is None and config.tls_client_ca is None:
            raise InvalidArgument(
                "serve",
                exposed[0],
                "not a loopback address, and no authentication is configured; "
                "give --token-file FILE (or tls_client_ca for mutual TLS), "
                "or listen on 127.0.0.1",
            )
        if config.tls_cert is None:
            _log.warning(
                "WARNING: %s is reachable from the network without TLS: bearer tokens and "
                "file contents cross it in clear text; set tls_cert and tls_key",
                ", ".join(exposed),
            )

    def _server_tls(self) -> ServerTLS | None:
        """The TLS files, loaded once for every listener that serves TLS."""
        if self._tls is None:
            config = self.config
            self._tls = ServerTLS.load(config.tls_cert, config.tls_key, config.tls_client_ca)
        return self._tls

    def _bind(
        self, server: grpc.aio.Server, address: str, credentials: grpc.ServerCredentials | None
    ) -> str:
        try:
            if _is_unix(address):
                path = _unix_path(address)
                with contextlib.suppress(FileNotFoundError):
                    if Path(path).is_socket():
                        os.unlink(path)  # a stale socket from a broker that died
                # gRPC creates the socket here, with the process umask: mask everything but
                # the owner from the start, so no other user can connect before the chmod.
                previous = os.umask(0o177)
                try:
                    server.add_insecure_port(f"unix:{path}")
                finally:
                    os.umask(previous)
                os.chmod(path, 0o600)
                return f"unix:{path}"
            error = bind_error(address)
            if error is not None:
                raise InvalidArgument("serve", address, f"cannot listen: {error.strerror or error}")
            if credentials is not None:
                port = server.add_secure_port(address, credentials)
            else:
                port = server.add_insecure_port(address)
        except RuntimeError as exc:
            reason = str(exc).split(";")[0]  # not gRPC's advice to set GRPC_VERBOSITY
            raise InvalidArgument("serve", address, f"cannot listen: {reason}") from None
        host = address.rsplit(":", 1)[0]
        return f"{host}:{port}"

    async def stop(self, grace: float | None = None) -> None:
        """Stop: refuse new calls, kill running commands, let other calls drain for ``grace``
        seconds (default ``config.shutdown_grace``), then cancel what is left. Idempotent."""
        if not self._running:
            return
        self._running = False
        grace = self.config.shutdown_grace if grace is None else grace
        started, self._started = self._started, []
        for extra in reversed(started):
            await extra.stop(grace)
        sandboxd, self._sandboxd = self._sandboxd, None
        if sandboxd is not None:
            await sandboxd.stop(grace)
        ssh, self._ssh = self._ssh, []
        for frontend in ssh:
            await frontend.aclose(grace)
        server, self._server = self._server, None
        if server is not None:
            if self._health is not None:
                await self._health.enter_graceful_shutdown()
            if self._servicer is not None:
                self._servicer.close_sessions()
                self._servicer.kill_running()
            await server.stop(grace)
            if self._servicer is not None:
                await self._servicer.drain(CLEANUP_TIMEOUT_S)
        if self._owns_backend and self._backend is not None:
            await self._backend.aclose()
        if self.enforcement is not None:
            self.enforcement.close()

    async def _start_ssh(self, backend: Backend) -> None:
        """Serve ``backend`` over SSH on every ``config.ssh`` address (``HOST:PORT``)."""
        config = self.config
        if not config.ssh:
            return
        # Imported only when asked for: asyncssh is not needed for gRPC alone.
        from ._frontends import ssh

        if config.ssh_authorized_keys is None:
            raise InvalidArgument(
                "serve", None, "--ssh needs an authorized_keys file (--ssh-authorized-keys FILE)"
            )
        options = ssh.SSHServerOptions(
            authorized_keys=config.ssh_authorized_keys,
            host_key=config.ssh_host_key or default_token_file().parent / "ssh_host_ed25519_key",
            command_timeout=config.ssh_command_timeout,
        )
        for address in config.ssh:
            host, port = parse_tcp_address(address, what="SSH address")
            Path(options.host_key).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:
                frontend = await ssh.start_ssh_server(
                    backend,
                    options,
                    host,
                    port,
                    guard=self._ssh_guard(),
                    refused=self._ssh_refused(),
                    version=broker_version(),
                    info=capabilities_of(backend, self.enforcement),
                )
            except OSError as exc:
                raise InvalidArgument("serve", address, f"cannot listen: {exc}") from None
            self._ssh.append(frontend)
            self.ssh_addresses.append(f"{address.rpartition(':')[0]}:{frontend.port}")

    def _ssh_guard(self) -> Callable[[Backend, str, str | None], Backend] | None:
        """Policy and audit around the core for each SSH connection, as for gRPC calls."""
        enforcement = self.enforcement
        if enforcement is None:
            return None

        def guard(core: Backend, principal: str, peer: str | None) -> Backend:
            return enforcement.wrap(core, principal=principal, transport="ssh", peer=peer)

        return guard

    def _ssh_refused(self) -> Callable[[str, str | None], None] | None:
        """Audit each SSH connection that failed to authenticate, as gRPC refusals are."""
        enforcement = self.enforcement
        if enforcement is None:
            return None

        def refused(reason: str, peer: str | None) -> None:
            enforcement.record_refusal(
                "authenticate", reason, principal=None, transport="ssh", peer=peer
            )

        return refused

    async def wait_closed(self) -> None:
        """Return when the server has stopped."""
        if self._server is not None:
            await self._server.wait_for_termination()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


async def serve(config: BrokerConfig, backend: Backend | None = None) -> None:
    """Run a broker until cancelled, then stop it gracefully (see :meth:`BrokerServer.stop`)."""
    server = BrokerServer(config, backend)
    await server.start()
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()
