"""The broker: the enforcement core and its front-ends.

General layout: the core modules (``_resolver`` for confinement over ``_openat2``, ``_treewalk``
and ``_rg`` for glob and search, then processes, policy, audit) import only ``operations``;
``_core`` composes them into :class:`Broker`, one object that implements every ``operations``
protocol; ``_guard.Enforcement`` (the ``operations`` policy, ``_audit``, ``_landlock``) wraps the
core once per connection, so every front-end meets the same policy and audit; the one service
table (``_frontends/_service.py``) holds every handler, and the front-ends
(``_frontends/grpc.py``, ``_frontends/ssh.py`` with ``_sshchannels``) translate their wire into it
and import the core, never the reverse; the HTTP front-ends (sandboxd's REST API here, MCP in
``agent_side``) run on one uvicorn setup, :func:`http_server` (``_frontends/_http.py``: a
deadline for each request's headers, no Nagle delay, no signal capture); ``_serve`` runs
front-ends over a backend; ``_cli_serve`` and
``_cli_audit`` are subcommands. The wire (generated code, codec, SSH framing) is the ``opsbroker``
package the clients import too, and the ``opsbroker`` command line is composed there
(``opsbroker.cli``), so nothing here imports ``agent_side``.
"""

import os as _os

# The broker forks commands from a process where gRPC threads run; gRPC's own fork handlers then
# crash the child now and then. Turn them off before anything imports grpc (an explicit setting
# in the environment wins).
_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from ._audit import AuditError as AuditError
from ._audit import AuditLog as AuditLog
from ._audit import AuditUnavailable as AuditUnavailable
from ._audit import verify_files as verify_files
from ._auth import TokenTable as TokenTable
from ._core import Broker as Broker
from ._frontends._http import bind as bind_http
from ._frontends._http import http_server as http_server
from ._guard import Enforcement as Enforcement
from ._landlock import Sandbox as Sandbox
from ._landlock import SandboxUnavailable as SandboxUnavailable
from ._landlock import landlock_abi as landlock_abi
from ._resolver import Root as Root
from ._serve import BrokerConfig as BrokerConfig
from ._serve import BrokerServer as BrokerServer
from ._serve import Frontend as Frontend
from ._serve import default_token_file as default_token_file
from ._serve import is_loopback_address as is_loopback_address
from ._serve import serve as serve

__all__ = [
    "AuditError",
    "AuditLog",
    "AuditUnavailable",
    "Broker",
    "BrokerConfig",
    "BrokerServer",
    "Enforcement",
    "Frontend",
    "Root",
    "Sandbox",
    "SandboxUnavailable",
    "TokenTable",
    "bind_http",
    "default_token_file",
    "http_server",
    "is_loopback_address",
    "landlock_abi",
    "serve",
    "verify_files",
]
