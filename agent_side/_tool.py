"""The three tool layers: what a provider sees, what the loop runs, what the product adds.

1. :class:`Tool` declares a capability to a provider: name, description, parameters (a pydantic
   model, whose JSON Schema is published, or a plain JSON Schema dict as MCP tools bring), and
   an optional constrained-sampling request. It cannot run.
2. :class:`AgentTool` adds what the loop needs: a ``label`` for people, ``prepare_arguments`` (folds
   known legacy argument shapes before validation), ``execute(tool_call_id, params, signal,
   on_update)`` and ``execution_mode``. ``execute`` raises on failure; the loop turns the exception
   into an error result.
3. :class:`ToolDefinition` adds what the product owns: prompt snippet and guidelines, render hooks,
   and a fifth ``ctx`` argument to ``execute`` (:class:`ToolContext`).

:func:`wrap_tool_definition` turns a definition into an AgentTool whose ``ctx`` comes from a factory
evaluated at call time; :func:`tool_definition_from_agent_tool` goes the other way. Each layer only
imports the one below it: the loop never sees a ``ToolContext``.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeAlias, TypeVar

from pydantic import BaseModel

from operations import AbortSignal

from ._messages import AgentToolResult

__all__ = [
    "AgentTool",
    "AgentToolUpdateCallback",
    "ConstrainedSampling",
    "ExecutionMode",
    "Parameters",
    "Tool",
    "ToolContext",
    "ToolDefinition",
    "define_tool",
    "parameters_schema",
    "tool_definition_from_agent_tool",
    "wrap_tool_definition",
    "wrap_tool_definitions",
]

ParamsT = TypeVar("ParamsT")
DetailsT = TypeVar("DetailsT")

ExecutionMode: TypeAlias = Literal["sequential", "parallel"]
"""``"sequential"`` on any tool called in a batch makes the whole batch sequential."""

Parameters: TypeAlias = type[BaseModel] | Mapping[str, Any]
"""A pydantic model class (validated params are an instance of it) or a plain JSON Schema dict."""


class AgentToolUpdateCallback(Protocol[DetailsT]):
    """Progress callback handed to ``execute``; calls after ``execute`` settles are ignored."""

    def __call__(self, partial_result: AgentToolResult[DetailsT], /) -> None: ...


@dataclass(frozen=True, kw_only=True)
class ConstrainedSampling:
    """Ask a provider to constrain sampling to the schema (``json_schema``) or a grammar.

    ``strict`` is ``"prefer"`` (fall back silently) or ``"require"`` (fail if unsupported).
    """

    type: Literal["json_schema", "grammar"] = "json_schema"
    strict: Literal["prefer", "require"] = "prefer"
    variants: Sequence[Mapping[str, Any]] | None = None

    def to_wire(self) -> dict[str, Any]:
        """The reference's ``ConstrainedSamplingConfig`` JSON."""
        if self.type == "grammar":
            return {"type": "grammar", "variants": [dict(v) for v in self.variants or ()]}
        return {"type": "json_schema", "strict": self.strict}


_SCHEMA_CACHE: dict[type[BaseModel], dict[str, Any]] = {}


def parameters_schema(parameters: Parameters) -> dict[str, Any]:
    """The JSON Schema a provider sees for ``parameters`` (a fresh copy each call).

    For a pydantic model this is ``model_json_schema()`` reshaped as TypeBox would publish it:
    nested models inlined (no ``$defs``/``$ref`` unless recursive), generated ``title`` keys
    removed, and an optional field declared ``T | None = None`` published as an optional,
    non-nullable ``T`` (so an explicit ``null`` from the model means "omitted"). A plain dict
    schema is returned unchanged.
    """
    if isinstance(parameters, type):
        schema = _SCHEMA_CACHE.get(parameters)
        if schema is None:
            from ._schema import publish_model_schema

            schema = publish_model_schema(parameters)
            _SCHEMA_CACHE[parameters] = schema
        return copy.deepcopy(schema)
    return copy.deepcopy(dict(parameters))


@dataclass(kw_only=True)
class Tool:
    """Provider-facing declaration of a callable capability (no execution, no UI).

    ``constrained_sampling=False`` explicitly turns a provider's constrained sampling off;
    ``None`` leaves the provider's default.
    """

    name: str
    description: str
    parameters: Parameters
    constrained_sampling: Literal[False] | ConstrainedSampling | None = None

    @property
    def parameters_schema(self) -> dict[str, Any]:
        """The parameters' JSON Schema, as published to the provider."""
        return parameters_schema(self.parameters)

    def to_wire(self) -> dict[str, Any]:
        """``{name, description, parameters[, constrainedSampling]}`` as the reference's ``Tool``."""
        wire: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters_schema,
        }
        if self.constrained_sampling is False:
            wire["constrainedSampling"] = False
        elif self.constrained_sampling is not None:
            wire["constrainedSampling"] = self.constrained_sampling.to_wire()
        return wire


async def _not_implemented(
    tool_call_id: str,
    params: Any,
    signal: AbortSignal | None,
    on_update: AgentToolUpdateCallback[Any] | None,
) -> AgentToolResult[Any]:
    raise NotImplementedError("This tool has no execute function; pass execute= when creating it.")


@dataclass(kw_only=True)
class AgentTool(Tool, Generic[ParamsT, DetailsT]):
    """A tool the loop can run.

    ``execute(tool_call_id, params, signal, on_update)`` receives validated ``params`` (an instance
    of the parameters model, or a dict for a plain schema), the run's :class:`~operations.AbortSignal`
    (or ``None``) and an optional progress callback; it returns an :class:`AgentToolResult` and
    raises on failure. ``prepare_arguments`` maps raw arguments to the current shape before
    validation (return a new object, do not mutate the input).
    """

    label: str = ""
    execute: Callable[
        [str, ParamsT, AbortSignal | None, AgentToolUpdateCallback[DetailsT] | None],
        Awaitable[AgentToolResult[DetailsT]],
    ] = _not_implemented
    prepare_arguments: Callable[[Any], Any] | None = None
    execution_mode: ExecutionMode | None = None
    prompt_snippet: str | None = None
    """Not used by the loop; set by tools that also publish a one-line prompt entry."""
    prompt_guidelines: Sequence[str] | None = None
    """Not used by the loop; guideline bullets contributed to a system prompt."""

    def __post_init__(self) -> None:
        if not self.label:
            self.label = self.name


@dataclass(kw_only=True)
class ToolContext:
    """What a product gives a :class:`ToolDefinition` at call time (``ExtensionContext``).

    ``cwd`` is the working directory tools resolve relative paths against; the other members are
    informational. A context factory builds a fresh one per call, so tools see current values.
    """

    cwd: str
    model: str | None = None
    thinking_level: str | None = None
    session_id: str | None = None
    session_file: str | None = None
    signal: AbortSignal | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class ToolDefinition(Generic[ParamsT, DetailsT]):
    """A product-level tool: an :class:`AgentTool` plus prompt metadata, rendering and a context.

    ``execute(tool_call_id, params, signal, on_update, ctx)``: ``ctx`` is a :class:`ToolContext`,
    or ``None`` when the tool was wrapped without a context factory (built-in tools accept that).
    ``render_call(args, theme, context)`` / ``render_result(result, options, theme, context)`` are
    UI hooks the runtime never calls.
    """

    name: str
    label: str
    description: str
    parameters: Parameters
    execute: Callable[
        [
            str,
            ParamsT,
            AbortSignal | None,
            AgentToolUpdateCallback[DetailsT] | None,
            ToolContext | None,
        ],
        Awaitable[AgentToolResult[DetailsT]],
    ]
    prompt_snippet: str | None = None
    prompt_guidelines: Sequence[str] | None = None
    constrained_sampling: Literal[False] | ConstrainedSampling | None = None
    render_shell: Literal["default", "self"] | None = None
    prepare_arguments: Callable[[Any], Any] | None = None
    execution_mode: ExecutionMode | None = None
    render_call: Callable[..., Any] | None = None
    render_result: Callable[..., Any] | None = None


def define_tool(definition: ToolDefinition[ParamsT, DetailsT]) -> ToolDefinition[ParamsT, DetailsT]:
    """Return ``definition`` unchanged: a typed spelling for declaring a tool (``defineTool``)."""
    return definition


def wrap_tool_definition(
    definition: ToolDefinition[ParamsT, DetailsT],
    ctx_factory: Callable[[], ToolContext] | None = None,
) -> AgentTool[ParamsT, DetailsT]:
    """Make the AgentTool the loop runs from a definition (``wrapToolDefinition``).

    Protocol and runtime fields are copied (name, label, description, parameters, constrained
    sampling, ``prepare_arguments``, ``execution_mode``); prompt fields and renderers stay with the
    definition. ``ctx_factory`` is called on every execution, so the tool sees the current session
    state rather than what existed when it was wrapped.
    """

    async def execute(
        tool_call_id: str,
        params: ParamsT,
        signal: AbortSignal | None,
        on_update: AgentToolUpdateCallback[DetailsT] | None,
    ) -> AgentToolResult[DetailsT]:
        ctx = ctx_factory() if ctx_factory is not None else None
        return await definition.execute(tool_call_id, params, signal, on_update, ctx)

    return AgentTool(
        name=definition.name,
        label=definition.label,
        description=definition.description,
        parameters=definition.parameters,
        constrained_sampling=definition.constrained_sampling,
        prepare_arguments=definition.prepare_arguments,
        execution_mode=definition.execution_mode,
        execute=execute,
    )


def wrap_tool_definitions(
    definitions: Sequence[ToolDefinition[Any, Any]],
    ctx_factory: Callable[[], ToolContext] | None = None,
) -> list[AgentTool[Any, Any]]:
    """:func:`wrap_tool_definition` over a list."""
    return [wrap_tool_definition(d, ctx_factory) for d in definitions]


def tool_definition_from_agent_tool(
    tool: AgentTool[ParamsT, DetailsT],
) -> ToolDefinition[ParamsT, DetailsT]:
    """The reverse conversion (``createToolDefinitionFromAgentTool``): ``ctx`` is ignored and the
    definition carries no prompt metadata or renderers."""

    async def execute(
        tool_call_id: str,
        params: ParamsT,
        signal: AbortSignal | None,
        on_update: AgentToolUpdateCallback[DetailsT] | None,
        ctx: ToolContext | None,
    ) -> AgentToolResult[DetailsT]:
        return await tool.execute(tool_call_id, params, signal, on_update)

    return ToolDefinition(
        name=tool.name,
        label=tool.label,
        description=tool.description,
        parameters=tool.parameters,
        constrained_sampling=tool.constrained_sampling,
        prepare_arguments=tool.prepare_arguments,
        execution_mode=tool.execution_mode,
        execute=execute,
    )
