"""The built-in tools behind MCP: ``opsbroker mcp``.

General layout: ``_results`` turns the tool runtime's declarations and result messages into MCP's
(tools with annotations, text and image content), with no logic of its own; ``_server`` is the MCP
server over a list of tools, every call run through
:func:`agent_side.loop.execute_tool_calls`; ``_embedded`` opens the broker core on a root behind
its policy and audit log, as ``opsbroker serve`` does; ``_framing`` (sans-I/O) and ``_stdio``
are the stdio wire, answering a line that is no JSON-RPC message; ``_http`` is Streamable HTTP
(the SDK's stateless transport on uvicorn) behind an Origin check and the broker's bearer tokens;
``_frontend`` serves it from a running broker (``opsbroker serve --mcp-http``). The subcommand is
:mod:`agent_side._cli_mcp`.
"""

from ._embedded import EMBEDDED_PRINCIPAL as EMBEDDED_PRINCIPAL
from ._embedded import MCP_TRANSPORT as MCP_TRANSPORT
from ._embedded import Embedded as Embedded
from ._embedded import embedded_broker as embedded_broker
from ._embedded import open_embedded as open_embedded
from ._frontend import McpHttpFrontend as McpHttpFrontend
from ._http import MCP_PATH as MCP_PATH
from ._http import serve_http as serve_http
from ._results import call_tool_result as call_tool_result
from ._results import mcp_tool as mcp_tool
from ._server import SERVER_NAME as SERVER_NAME
from ._server import ToolsFor as ToolsFor
from ._server import build_server as build_server
from ._server import serve_stdio as serve_stdio

__all__ = [
    "EMBEDDED_PRINCIPAL",
    "MCP_PATH",
    "MCP_TRANSPORT",
    "SERVER_NAME",
    "Embedded",
    "McpHttpFrontend",
    "ToolsFor",
    "build_server",
    "call_tool_result",
    "embedded_broker",
    "mcp_tool",
    "open_embedded",
    "serve_http",
    "serve_stdio",
]
