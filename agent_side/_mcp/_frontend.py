"""MCP over Streamable HTTP as a front-end of a running broker: ``opsbroker serve --mcp-http``.

The broker's own core, policy, audit log and tokens: each request runs the tools on
:meth:`broker.BrokerServer.guarded` for the principal its bearer token names (audit transport
``mcp``), and a request turned away for its credentials is audited as the broker's gRPC and SSH
refusals are. The gate, the stateless transport and cancellation are those of
``opsbroker mcp --http`` (:mod:`agent_side._mcp._http`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from mcp.server import ServerRequestContext

from broker import BrokerServer, bind_http, is_loopback_address
from operations import InvalidArgument

from .._tool import AgentTool
from ._embedded import MCP_TRANSPORT
from ._http import HttpServer, request_peer, request_principal

__all__ = ["McpHttpFrontend"]

ANONYMOUS = "anonymous"
"""The principal of the tool list served before any token is checked (``tools/list`` only)."""


class McpHttpFrontend:
    """Serve the built-in tools over Streamable HTTP at ``http://ADDRESS/mcp`` with the broker.

    An ``address`` that is not loopback needs the broker's tokens configured on purpose
    (``--token-file``), as for gRPC.
    """

    def __init__(self, address: str, *, allowed_origins: Sequence[str] = ()) -> None:
        self.address = address
        self._origins = tuple(allowed_origins)
        self._server: HttpServer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self, broker: BrokerServer) -> list[str]:
        from ..tools import create_all_tools

        if not is_loopback_address(self.address) and broker.config.token_file is None:
            raise InvalidArgument(
                "serve",
                self.address,
                "--mcp-http address is not loopback, and no tokens are configured; give "
                "--token-file FILE, or listen on 127.0.0.1",
            )
        logging.getLogger("mcp").setLevel(logging.WARNING)  # not the SDK's lines per request
        tokens = broker.frontend_tokens()
        try:
            sock = bind_http(self.address)
        except OSError as exc:
            raise InvalidArgument(
                "serve", self.address, f"--mcp-http cannot listen: {exc.strerror or exc}"
            ) from None
        root = broker.backend.root

        def tools_for(ctx: ServerRequestContext[Any]) -> list[AgentTool[Any, Any]]:
            principal = request_principal(ctx) or ANONYMOUS
            backend = broker.guarded(principal, MCP_TRANSPORT, request_peer(ctx))
            return create_all_tools(cwd=root, operations=backend)

        def refused(reason: str, peer: str | None) -> None:
            broker.record_refusal("mcp", reason, MCP_TRANSPORT, peer)

        self._server = HttpServer(
            create_all_tools(cwd=root),  # listed only: every call runs on tools_for's backend
            sock,
            tokens,
            tools_for=tools_for,
            allowed_origins=self._origins,
            refused=refused,
            handle_signals=False,
            grace=broker.config.shutdown_grace,
        )
        ready = asyncio.Event()
        self._task = asyncio.create_task(self._server.serve(lambda _url: ready.set()))
        waiting = asyncio.create_task(ready.wait())
        done, _ = await asyncio.wait([self._task, waiting], return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if self._task in done:  # it ended before accepting requests
            self._task.result()
            raise InvalidArgument("serve", self.address, "--mcp-http stopped before it served")
        return [f"mcp-http {self._server.url}"]

    async def stop(self, grace: float) -> None:
        server, task = self._server, self._task
        self._server = self._task = None
        if server is None or task is None:
            return
        server.shutdown()
        try:
            await asyncio.wait_for(asyncio.shield(task), grace + 1)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
