"""``opsbroker serve``: run a broker until SIGINT or SIGTERM.

``opsbroker serve --root DIR`` alone serves gRPC on loopback (:data:`DEFAULT_GRPC_ADDRESS`, or a
free loopback port when that one is taken) with a generated token, and prints how to connect.
Every failure is one line on stderr and exit status 1 (2 for usage errors, 4 for an invalid
policy).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shlex
import signal
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import pydantic
from opsbroker import eventloop
from opsbroker.malloc import tune_allocator

from operations import OpsError, PolicyError

from ._serve import (
    DEFAULT_GRPC_ADDRESS,
    SANDBOXD_GRPC_ADDRESS,
    SANDBOXD_HTTP_ADDRESS,
    BrokerConfig,
    BrokerServer,
    Frontend,
    bind_error,
    is_loopback_address,
)

__all__ = ["ServeExtension", "add_parser", "run"]


class ServeExtension(Protocol):
    """Options of ``opsbroker serve`` that add a :class:`~broker.Frontend` (``--mcp-http``).

    Composed in by the ``opsbroker`` command, so the broker imports nothing of the agent side.
    """

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the options to ``serve``'s parser."""
        ...

    def frontends(self, args: argparse.Namespace) -> list[Frontend]:
        """The front-ends the parsed options ask for (none when they are not given).

        Raises:
            ValueError: the options do not fit together (a usage error).
        """
        ...


def add_parser(subparsers: Any, extensions: Sequence[ServeExtension] = ()) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve a workspace to remote agents",
        description="Serve the workspace at --root over gRPC and/or SSH until SIGINT or SIGTERM.",
    )
    parser.add_argument("--root", type=Path, help="the workspace root directory")
    parser.add_argument(
        "--grpc",
        action="append",
        metavar="ADDR",
        help=(
            f"listen address: HOST:PORT or unix:/path.sock (repeatable; default "
            f"{DEFAULT_GRPC_ADDRESS}, or a free loopback port if it is taken). An address that "
            "is not loopback needs --token-file (or mutual TLS: --tls-client-ca)"
        ),
    )
    parser.add_argument(
        "--ssh",
        action="append",
        metavar="ADDR",
        help="also (or only, without --grpc) serve SSH on HOST:PORT (repeatable)",
    )
    parser.add_argument(
        "--ssh-authorized-keys", type=Path, metavar="FILE", help="the keys SSH clients may use"
    )
    parser.add_argument(
        "--ssh-host-key", type=Path, metavar="FILE", help="the SSH host key (created if missing)"
    )
    parser.add_argument(
        "--sandboxd",
        action="store_true",
        help=(
            "also serve the sandboxd surface (agent-sandbox KEP-539.2): ProcessService gRPC on "
            f"{SANDBOXD_GRPC_ADDRESS} and the REST file API on {SANDBOXD_HTTP_ADDRESS}"
        ),
    )
    parser.add_argument(
        "--sandboxd-grpc",
        action="append",
        metavar="ADDR",
        help="serve sandboxd's ProcessService on HOST:PORT instead (repeatable; implies --sandboxd)",
    )
    parser.add_argument(
        "--sandboxd-http",
        action="append",
        metavar="ADDR",
        help="serve sandboxd's REST API on HOST:PORT instead (repeatable; implies --sandboxd)",
    )
    parser.add_argument(
        "--tls-cert", type=Path, metavar="FILE", help="serve TCP listeners over TLS: certificate"
    )
    parser.add_argument("--tls-key", type=Path, metavar="FILE", help="...and its private key")
    parser.add_argument(
        "--tls-client-ca",
        type=Path,
        metavar="FILE",
        help="mutual TLS: require client certificates this CA signed (principal: the SPIFFE ID)",
    )
    parser.add_argument(
        "--tls-client-spiffe-id",
        action="append",
        metavar="ID",
        help=(
            "with --tls-client-ca, admit only this SPIFFE ID (spiffe://DOMAIN/PATH), or every ID "
            "of a trust domain (spiffe://DOMAIN); repeatable"
        ),
    )
    parser.add_argument("--config", type=Path, help="a TOML file with BrokerConfig fields")
    parser.add_argument("--token-file", type=Path, help="bearer tokens, 'TOKEN PRINCIPAL' lines")
    parser.add_argument("--policy", type=Path, help="a policy TOML file (default: the safe policy)")
    parser.add_argument("--audit-log", type=Path, help="append one hash-chained JSON line per call")
    parser.add_argument(
        "--record",
        type=Path,
        metavar="FILE",
        help="record the session to a cassette, for InMemoryOperations.from_cassette(FILE)",
    )
    parser.add_argument("--quiet", action="store_true", help="do not log one line per call")
    for extension in extensions:
        extension.add_arguments(parser)
    parser.set_defaults(handler=lambda args: run(args, extensions))


def _config(args: argparse.Namespace) -> BrokerConfig:
    overrides = {
        "root": args.root,
        "grpc": args.grpc,
        "token_file": args.token_file,
        "tls_cert": args.tls_cert,
        "tls_key": args.tls_key,
        "tls_client_ca": args.tls_client_ca,
        "tls_client_spiffe_ids": args.tls_client_spiffe_id,
        "ssh": args.ssh,
        "ssh_authorized_keys": args.ssh_authorized_keys,
        "ssh_host_key": args.ssh_host_key,
        "policy": args.policy,
        "audit_log": args.audit_log,
        "record": args.record,
    }
    if args.sandboxd or args.sandboxd_grpc or args.sandboxd_http:
        overrides["sandboxd_grpc"] = args.sandboxd_grpc or [SANDBOXD_GRPC_ADDRESS]
        overrides["sandboxd_http"] = args.sandboxd_http or [SANDBOXD_HTTP_ADDRESS]
    if args.ssh and not args.grpc:
        overrides["grpc"] = []  # --ssh alone serves SSH only
    if args.config is not None:
        config = BrokerConfig.from_toml(args.config, **overrides)
    elif args.root is None:
        raise _Usage("--root DIR is required (or --config FILE)")
    else:
        config = BrokerConfig.model_validate({k: v for k, v in overrides.items() if v is not None})
    keys = config.ssh_authorized_keys
    if config.ssh and keys is not None and not keys.is_file():
        what = "is not a file" if keys.exists() else "does not exist"
        raise _Usage(
            f"--ssh-authorized-keys {str(keys)!r} {what}; give the file of public keys SSH "
            "clients may use (OpenSSH authorized_keys format, one key a line)"
        )
    if "grpc" not in config.model_fields_set and bind_error(DEFAULT_GRPC_ADDRESS) is not None:
        # Nobody asked for this port: rather than fail, serve on any free loopback port.
        print(f"opsbroker: {DEFAULT_GRPC_ADDRESS} is in use; using a free port", flush=True)
        config = config.model_copy(update={"grpc": ["127.0.0.1:0"]})
    return config


class _Usage(Exception):
    """A usage error of ``opsbroker serve`` (exit status 2)."""


def _how_to_connect(server: BrokerServer) -> str | None:
    """A ready-to-paste ``opsbroker call`` for the first gRPC address, or ``None`` (mTLS only)."""
    for address in server.addresses:
        if address.startswith("unix:"):
            url = "grpc+unix://" + address.removeprefix("unix:")
            return f"opsbroker call {shlex.quote(url)} ls '{{}}'"
        if server.token_file is not None:
            if not is_loopback_address(address):  # a wildcard or a name: say which host to use
                address = "THIS-HOST:" + address.rpartition(":")[2]
            token = shlex.quote(str(server.token_file))
            return f"opsbroker call grpc://{address} --token-file {token} ls '{{}}'"
    return None


async def _serve(config: BrokerConfig, frontends: Sequence[Frontend]) -> None:
    server = BrokerServer(config, frontends=frontends)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        for address in server.addresses:
            print(f"opsbroker: serving {config.root} on grpc {address}", flush=True)
        for address in server.ssh_addresses:
            print(f"opsbroker: serving {config.root} on ssh {address}", flush=True)
        for address in server.sandboxd_grpc_addresses:
            print(f"opsbroker: serving {config.root} on sandboxd-grpc {address}", flush=True)
        for address in server.sandboxd_http_addresses:
            print(f"opsbroker: serving {config.root} on sandboxd-http {address}", flush=True)
        for address in server.frontend_addresses:
            print(f"opsbroker: serving {config.root} on {address}", flush=True)
        print(f"opsbroker: principals: {server.principal_model}", flush=True)
        # "uvloop" or "asyncio" (opsbroker.eventloop; OPSBROKER_EVENT_LOOP chooses).
        print(f"opsbroker: event loop: {type(loop).__module__.partition('.')[0]}", flush=True)
        if server.token_file is not None:
            print(f"opsbroker: token file: {server.token_file}", flush=True)
        _print_policy(server)
        example = _how_to_connect(server)
        if example is not None:
            print(f"opsbroker: connect with: {example}", flush=True)
        await stop.wait()
        print("opsbroker: stopping (draining calls, killing commands)", flush=True)
    finally:
        await server.stop()
    print("opsbroker: stopped", flush=True)


def _print_policy(server: BrokerServer) -> None:
    """The deny lists in force (built-in globs included), and a warning when ``read_only``
    cannot bind commands because the kernel sandbox is off."""
    enforcement = server.enforcement
    if enforcement is None:
        return
    policy = enforcement.policy
    print(f"opsbroker: deny_read: {', '.join(policy.deny_read) or '(none)'}", flush=True)
    print(f"opsbroker: deny_write: {', '.join(policy.deny_write) or '(none)'}", flush=True)
    if policy.read_only and not enforcement.sandbox_active:
        print(
            "opsbroker: WARNING: read_only refuses file operations, but commands can still "
            "write under the root: the kernel sandbox is off (set sandbox.mode, or exec.enabled "
            "= false)",
            file=sys.stderr,
            flush=True,
        )


POLICY_ERROR_STATUS = 4
"""Exit status of ``serve`` for a policy file that is missing, not TOML, or invalid."""


def run(args: argparse.Namespace, extensions: Sequence[ServeExtension] = ()) -> int:
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    try:
        config = _config(args)
        try:
            frontends = [f for extension in extensions for f in extension.frontends(args)]
        except ValueError as exc:
            raise _Usage(str(exc)) from None
        tune_allocator()  # before the first large buffer: streamed reads reuse heap pages
        eventloop.run(_serve(config, frontends))
    except _Usage as exc:
        return _fail(f"{exc} (see 'opsbroker serve --help')", 2)
    except eventloop.EventLoopError as exc:
        return _fail(str(exc), 2)
    except OpsError as exc:
        return _fail(str(exc))
    except PolicyError as exc:
        return _fail(str(exc), POLICY_ERROR_STATUS)
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'config'}: {e['msg']}" for e in exc.errors()
        )
        return _fail(f"invalid configuration: {problems}")
    except tomllib.TOMLDecodeError as exc:
        return _fail(f"invalid TOML in {args.config}: {exc}")
    except OSError as exc:
        where = f" {exc.filename!r}" if exc.filename else ""
        return _fail(f"cannot read{where}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    return 0


def _fail(message: str, status: int = 1) -> int:
    line = " ".join(message.split())  # one line, whatever the message held
    print(f"opsbroker serve: {line}", file=sys.stderr, flush=True)
    return status
