"""The tool registry: which tools exist, which are active, and which a call added.

A :class:`ToolRegistry` keeps registered tools by name (re-registering a name replaces it) and an
ordered list of active names. ``register_tool`` activates a name that is new to the registry;
``set_active_tools`` keeps the given order and silently drops unknown names. ``active_tools()``
returns what the loop should see *now*: read it before every provider request, and a change made
mid-run (even by a tool) takes effect on the next request.

Every active tool is wrapped: a :class:`~agent_side.ToolDefinition` gets the registry's context
factory (evaluated per call), and every tool records ``added_tool_names``: if a call only *added*
active tools (nothing that was active before is gone), the new names are appended to its result,
and the loop copies them into the result message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from operations import AbortSignal

from ._messages import AgentToolResult
from ._tool import (
    AgentTool,
    AgentToolUpdateCallback,
    Parameters,
    ToolContext,
    ToolDefinition,
    tool_definition_from_agent_tool,
    wrap_tool_definition,
)

__all__ = ["ToolInfo", "ToolRegistry"]


@dataclass(frozen=True, kw_only=True)
class ToolInfo:
    """A registered tool as listed by :meth:`ToolRegistry.all_tools`."""

    name: str
    description: str
    parameters: Parameters
    prompt_guidelines: Sequence[str]
    active: bool


class ToolRegistry:
    """Registered tools, the active set, and the wrapping the loop runs them through."""

    def __init__(
        self,
        tools: Iterable[ToolDefinition[Any, Any] | AgentTool[Any, Any]] = (),
        *,
        context_factory: Callable[[], ToolContext] | None = None,
    ) -> None:
        self._definitions: dict[str, ToolDefinition[Any, Any]] = {}
        self._active: list[str] = []
        self._context_factory = context_factory
        for tool in tools:
            self.register_tool(tool)

    def register_tool(self, tool: ToolDefinition[Any, Any] | AgentTool[Any, Any]) -> None:
        """Register (or replace) a tool by name; a name new to the registry becomes active."""
        definition = (
            tool if isinstance(tool, ToolDefinition) else tool_definition_from_agent_tool(tool)
        )
        if isinstance(tool, AgentTool):
            definition.prompt_snippet = tool.prompt_snippet
            definition.prompt_guidelines = tool.prompt_guidelines
        is_new = definition.name not in self._definitions
        self._definitions[definition.name] = definition
        if is_new and definition.name not in self._active:
            self._active.append(definition.name)

    def set_active_tools(self, names: Iterable[str]) -> None:
        """Make exactly ``names`` active, in that order; unknown names are dropped silently."""
        active: list[str] = []
        for name in names:
            if name in self._definitions and name not in active:
                active.append(name)
        self._active = active

    def active_tool_names(self) -> list[str]:
        """The active names, in order."""
        return list(self._active)

    def get_definition(self, name: str) -> ToolDefinition[Any, Any] | None:
        """The registered definition for ``name``, active or not."""
        return self._definitions.get(name)

    def all_tools(self) -> list[ToolInfo]:
        """Every registered tool, in registration order."""
        return [
            ToolInfo(
                name=d.name,
                description=d.description,
                parameters=d.parameters,
                prompt_guidelines=list(d.prompt_guidelines or ()),
                active=d.name in self._active,
            )
            for d in self._definitions.values()
        ]

    def active_tools(self) -> list[AgentTool[Any, Any]]:
        """The AgentTools to give the loop now, in active order."""
        return [self._wrap(self._definitions[name]) for name in self._active]

    def _wrap(self, definition: ToolDefinition[Any, Any]) -> AgentTool[Any, Any]:
        tool = wrap_tool_definition(definition, self._context_factory)
        inner = tool.execute

        async def execute(
            tool_call_id: str,
            params: Any,
            signal: AbortSignal | None,
            on_update: AgentToolUpdateCallback[Any] | None,
        ) -> AgentToolResult[Any]:
            before = list(self._active)
            result = await inner(tool_call_id, params, signal, on_update)
            after = self._active
            if all(name in after for name in before):
                added = [name for name in after if name not in before]
                if added:
                    names = list(result.added_tool_names or ())
                    names += [name for name in added if name not in names]
                    result = result.model_copy(update={"added_tool_names": names})
            return result

        tool.execute = execute
        tool.prompt_snippet = definition.prompt_snippet
        tool.prompt_guidelines = definition.prompt_guidelines
        return tool

    def system_prompt_tools_section(self) -> str:
        """``Available tools:`` and one ``- name: snippet`` line per active tool with a snippet
        (collapsed to one line), or ``(none)``."""
        lines = []
        for name in self._active:
            snippet = self._definitions[name].prompt_snippet
            if snippet:
                lines.append(f"- {name}: {' '.join(snippet.split())}")
        return "Available tools:\n" + ("\n".join(lines) if lines else "(none)")
