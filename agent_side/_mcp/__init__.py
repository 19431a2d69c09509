"""The built-in tools behind MCP: ``opsbroker mcp``.

General layout: ``_results`` turns the tool runtime's declarations and result messages into MCP's
(tools with annotations, text and image content), with no logic of its own; ``_server`` is the MCP
server over a list of tools, every call run through
:func:`agent_side.loop.execute_tool_calls`; ``_embedded`` opens the broker core on a root behind
its policy and audit log, as ``opsbroker serve`` does; ``_framing`` (sans-I/O) and ``_stdio``
are the stdio wire, answering a line that is no JSON-RPC message. The subcommand is
:mod:`agent_side._cli_mcp`.
"""

from ._embedded import EMBEDDED_PRINCIPAL as EMBEDDED_PRINCIPAL
from ._embedded import MCP_TRANSPORT as MCP_TRANSPORT
from ._embedded import embedded_broker as embedded_broker
from ._results import call_tool_result as call_tool_result
from ._results import mcp_tool as mcp_tool
from ._server import SERVER_NAME as SERVER_NAME
from ._server import build_server as build_server
from ._server import serve_stdio as serve_stdio

__all__ = [
    "EMBEDDED_PRINCIPAL",
    "MCP_TRANSPORT",
    "SERVER_NAME",
    "build_server",
    "call_tool_result",
    "embedded_broker",
    "mcp_tool",
    "serve_stdio",
]
