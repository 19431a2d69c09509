"""``opsbroker serve``: run a broker until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from operations import OpsError

from ._serve import BrokerConfig, BrokerServer

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> None:
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
        help="listen address: HOST:PORT or unix:/path.sock (repeatable; default 127.0.0.1:7443)",
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
    parser.add_argument("--config", type=Path, help="a TOML file with BrokerConfig fields")
    parser.add_argument("--token-file", type=Path, help="bearer tokens, 'TOKEN PRINCIPAL' lines")
    parser.add_argument("--policy", type=Path, help="a policy TOML file (default: the safe policy)")
    parser.add_argument("--audit-log", type=Path, help="append one hash-chained JSON line per call")
    parser.add_argument("--quiet", action="store_true", help="do not log one line per call")
    parser.set_defaults(handler=run)


def _config(args: argparse.Namespace) -> BrokerConfig:
    overrides = {
        "root": args.root,
        "grpc": args.grpc,
        "token_file": args.token_file,
        "ssh": args.ssh,
        "ssh_authorized_keys": args.ssh_authorized_keys,
        "ssh_host_key": args.ssh_host_key,
        "policy": args.policy,
        "audit_log": args.audit_log,
    }
    if args.ssh and not args.grpc:
        overrides["grpc"] = []  # --ssh alone serves SSH only
    if args.config is not None:
        return BrokerConfig.from_toml(args.config, **overrides)
    if args.root is None:
        raise SystemExit("opsbroker serve: --root DIR is required (or --config FILE)")
    return BrokerConfig.model_validate({k: v for k, v in overrides.items() if v is not None})


async def _serve(config: BrokerConfig) -> None:
    server = BrokerServer(config)
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
        print(f"opsbroker: principals: {server.principal_model}", flush=True)
        if server.token_file is not None:
            print(f"opsbroker: token file: {server.token_file}", flush=True)
        await stop.wait()
        print("opsbroker: stopping (draining calls, killing commands)", flush=True)
    finally:
        await server.stop()
    print("opsbroker: stopped", flush=True)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    try:
        config = _config(args)
        asyncio.run(_serve(config))
    except OpsError as exc:
        print(f"opsbroker serve: {exc}", file=sys.stderr)
        return 1
    return 0
