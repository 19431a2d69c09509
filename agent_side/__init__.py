"""The agent side: the tool runtime, the built-in tools, and remote clients for the broker.

General layout: ``_connect`` picks a backend from a URL; ``_remote/`` holds the gRPC and SSH
clients (each implements every ``operations`` protocol); the tool runtime and the built-in tools
only ever see ``operations`` interfaces, so they run unchanged on every backend.

The tool runtime: ``_tool`` (the three tool layers), ``_messages`` (messages, results, events),
``_schema`` (publishing pydantic parameters), ``_validate`` (the validation pipeline) over
``_json_schema`` (the checker) and ``_coerce_typebox`` / ``_coerce_ajv`` (the two coercion rule
sets), ``_loop`` (``execute_tool_calls``), ``_registry`` (registered and active tools) and
``_mutation_queue`` (per-file serialisation of read-modify-write tools).

The ``opsbroker call`` and ``opsbroker run`` commands: ``_cli_call`` and ``_cli_run``, sharing
``_cli`` (backend options, input parsing, one-line failures); see ``docs/cli.md``.
"""

from ._connect import connect as connect
from ._connect import register_scheme as register_scheme
from ._loop import AfterToolCallContext as AfterToolCallContext
from ._loop import AfterToolCallResult as AfterToolCallResult
from ._loop import AgentContext as AgentContext
from ._loop import BeforeToolCallContext as BeforeToolCallContext
from ._loop import BeforeToolCallResult as BeforeToolCallResult
from ._loop import ToolBatchResult as ToolBatchResult
from ._loop import execute_tool_calls as execute_tool_calls
from ._messages import AgentEvent as AgentEvent
from ._messages import AgentToolResult as AgentToolResult
from ._messages import AssistantContent as AssistantContent
from ._messages import AssistantMessage as AssistantMessage
from ._messages import ImageContent as ImageContent
from ._messages import Message as Message
from ._messages import MessageEndEvent as MessageEndEvent
from ._messages import MessageStartEvent as MessageStartEvent
from ._messages import StopReason as StopReason
from ._messages import TextContent as TextContent
from ._messages import ThinkingContent as ThinkingContent
from ._messages import ToolCall as ToolCall
from ._messages import ToolExecutionEndEvent as ToolExecutionEndEvent
from ._messages import ToolExecutionStartEvent as ToolExecutionStartEvent
from ._messages import ToolExecutionUpdateEvent as ToolExecutionUpdateEvent
from ._messages import ToolResultContent as ToolResultContent
from ._messages import ToolResultMessage as ToolResultMessage
from ._messages import Usage as Usage
from ._messages import UsageCost as UsageCost
from ._messages import UserMessage as UserMessage
from ._messages import error_tool_result as error_tool_result
from ._mutation_queue import mutation_queue_key as mutation_queue_key
from ._mutation_queue import with_file_mutation_queue as with_file_mutation_queue
from ._registry import ToolInfo as ToolInfo
from ._registry import ToolRegistry as ToolRegistry
from ._schema import JsonNumber as JsonNumber
from ._tool import AgentTool as AgentTool
from ._tool import AgentToolUpdateCallback as AgentToolUpdateCallback
from ._tool import ConstrainedSampling as ConstrainedSampling
from ._tool import ExecutionMode as ExecutionMode
from ._tool import Parameters as Parameters
from ._tool import Tool as Tool
from ._tool import ToolContext as ToolContext
from ._tool import ToolDefinition as ToolDefinition
from ._tool import define_tool as define_tool
from ._tool import parameters_schema as parameters_schema
from ._tool import tool_definition_from_agent_tool as tool_definition_from_agent_tool
from ._tool import wrap_tool_definition as wrap_tool_definition
from ._tool import wrap_tool_definitions as wrap_tool_definitions
from ._validate import ToolValidationError as ToolValidationError
from ._validate import validate_tool_arguments as validate_tool_arguments
from ._validate import validate_tool_call as validate_tool_call

__all__ = [
    "AfterToolCallContext",
    "AfterToolCallResult",
    "AgentContext",
    "AgentEvent",
    "AgentTool",
    "AgentToolResult",
    "AgentToolUpdateCallback",
    "AssistantContent",
    "AssistantMessage",
    "BeforeToolCallContext",
    "BeforeToolCallResult",
    "ConstrainedSampling",
    "ExecutionMode",
    "ImageContent",
    "JsonNumber",
    "Message",
    "MessageEndEvent",
    "MessageStartEvent",
    "Parameters",
    "StopReason",
    "TextContent",
    "ThinkingContent",
    "Tool",
    "ToolBatchResult",
    "ToolCall",
    "ToolContext",
    "ToolDefinition",
    "ToolExecutionEndEvent",
    "ToolExecutionStartEvent",
    "ToolExecutionUpdateEvent",
    "ToolInfo",
    "ToolRegistry",
    "ToolResultContent",
    "ToolResultMessage",
    "ToolValidationError",
    "Usage",
    "UsageCost",
    "UserMessage",
    "connect",
    "define_tool",
    "error_tool_result",
    "execute_tool_calls",
    "mutation_queue_key",
    "parameters_schema",
    "register_scheme",
    "tool_definition_from_agent_tool",
    "validate_tool_arguments",
    "validate_tool_call",
    "with_file_mutation_queue",
    "wrap_tool_definition",
    "wrap_tool_definitions",
]
