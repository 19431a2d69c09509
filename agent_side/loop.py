"""The tool-execution loop's public names: ``execute_tool_calls``, its hooks, messages and events.

``agent_side.loop.execute_tool_calls(tools, assistant_message, emit=...)`` runs one assistant
message's tool calls as the reference does; see :mod:`agent_side._loop` for the event order.
"""

from ._loop import ABORTED_MESSAGE as ABORTED_MESSAGE
from ._loop import AfterToolCall as AfterToolCall
from ._loop import AfterToolCallContext as AfterToolCallContext
from ._loop import AfterToolCallResult as AfterToolCallResult
from ._loop import AgentContext as AgentContext
from ._loop import BeforeToolCall as BeforeToolCall
from ._loop import BeforeToolCallContext as BeforeToolCallContext
from ._loop import BeforeToolCallResult as BeforeToolCallResult
from ._loop import EventSink as EventSink
from ._loop import ToolBatchResult as ToolBatchResult
from ._loop import ToolExecution as ToolExecution
from ._loop import execute_tool_calls as execute_tool_calls
from ._loop import length_stop_message as length_stop_message
from ._loop import should_terminate_tool_batch as should_terminate_tool_batch
from ._messages import AgentEvent as AgentEvent
from ._messages import AgentToolResult as AgentToolResult
from ._messages import AssistantMessage as AssistantMessage
from ._messages import ImageContent as ImageContent
from ._messages import Message as Message
from ._messages import MessageEndEvent as MessageEndEvent
from ._messages import MessageStartEvent as MessageStartEvent
from ._messages import TextContent as TextContent
from ._messages import ToolCall as ToolCall
from ._messages import ToolExecutionEndEvent as ToolExecutionEndEvent
from ._messages import ToolExecutionStartEvent as ToolExecutionStartEvent
from ._messages import ToolExecutionUpdateEvent as ToolExecutionUpdateEvent
from ._messages import ToolResultMessage as ToolResultMessage
from ._messages import Usage as Usage
from ._messages import error_tool_result as error_tool_result
from ._validate import ToolValidationError as ToolValidationError
from ._validate import validate_tool_arguments as validate_tool_arguments
from ._validate import validate_tool_call as validate_tool_call

__all__ = [
    "ABORTED_MESSAGE",
    "AfterToolCall",
    "AfterToolCallContext",
    "AfterToolCallResult",
    "AgentContext",
    "AgentEvent",
    "AgentToolResult",
    "AssistantMessage",
    "BeforeToolCall",
    "BeforeToolCallContext",
    "BeforeToolCallResult",
    "EventSink",
    "ImageContent",
    "Message",
    "MessageEndEvent",
    "MessageStartEvent",
    "TextContent",
    "ToolBatchResult",
    "ToolCall",
    "ToolExecution",
    "ToolExecutionEndEvent",
    "ToolExecutionStartEvent",
    "ToolExecutionUpdateEvent",
    "ToolResultMessage",
    "ToolValidationError",
    "Usage",
    "error_tool_result",
    "execute_tool_calls",
    "length_stop_message",
    "should_terminate_tool_batch",
    "validate_tool_arguments",
    "validate_tool_call",
]
