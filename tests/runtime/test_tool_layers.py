"""The three tool layers, their conversions, schema publishing, and the registry (reference 6)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agent_side import (
    AgentTool,
    AgentToolResult,
    ConstrainedSampling,
    TextContent,
    Tool,
    ToolContext,
    ToolDefinition,
    ToolRegistry,
    define_tool,
    parameters_schema,
    tool_definition_from_agent_tool,
    wrap_tool_definition,
)
from agent_side.loop import execute_tool_calls
from operations import AbortSignal

from ._fakes import ValueParams, assistant, echo_tool


class Edit(BaseModel):
    oldText: str = Field(description="Exact text to replace")
    newText: str


class EditParams(BaseModel):
    path: str = Field(description="Path to the file")
    edits: list[Edit]
    limit: int | None = Field(default=None, description="Maximum")


def test_published_schema_is_typebox_shaped() -> None:
    assert parameters_schema(EditParams) == {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Path to the file"},
            "edits": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "oldText": {"type": "string", "description": "Exact text to replace"},
                        "newText": {"type": "string"},
                    },
                    "required": ["oldText", "newText"],
                },
            },
            "limit": {"type": "integer", "description": "Maximum"},
        },
        "required": ["path", "edits"],
    }
    plain = {"type": "object", "properties": {"q": {"type": "string"}}}
    assert parameters_schema(plain) == plain


def test_tool_wire_form() -> None:
    tool = Tool(
        name="edit",
        description="Edit a file",
        parameters=EditParams,
        constrained_sampling=ConstrainedSampling(strict="require"),
    )
    wire = tool.to_wire()
    assert wire["name"] == "edit" and wire["parameters"]["required"] == ["path", "edits"]
    assert wire["constrainedSampling"] == {"type": "json_schema", "strict": "require"}
    assert "constrainedSampling" not in Tool(name="x", description="", parameters={}).to_wire()
    off = Tool(name="x", description="", parameters={}, constrained_sampling=False).to_wire()
    assert off["constrainedSampling"] is False


async def test_wrap_tool_definition_evaluates_the_context_factory_per_call() -> None:
    contexts: list[ToolContext | None] = []
    cwd = ["/one"]

    async def execute(
        tid: str, params: Any, signal: AbortSignal | None, on_update: Any, ctx: ToolContext | None
    ) -> AgentToolResult[Any]:
        contexts.append(ctx)
        return AgentToolResult[Any](
            content=[TextContent(text=f"{ctx.cwd if ctx else None}")], details=None
        )

    definition = define_tool(
        ToolDefinition(
            name="where",
            label="Where",
            description="Print the cwd",
            parameters=ValueParams,
            prompt_snippet="Show the working directory",
            prompt_guidelines=["Use where before reading."],
            execution_mode="sequential",
            execute=execute,
        )
    )
    tool = wrap_tool_definition(definition, lambda: ToolContext(cwd=cwd[0]))
    assert (tool.name, tool.label, tool.description, tool.parameters, tool.execution_mode) == (
        "where",
        "Where",
        "Print the cwd",
        ValueParams,
        "sequential",
    )
    assert tool.prompt_snippet is None and tool.prompt_guidelines is None  # not copied
    await tool.execute("1", ValueParams(value="x"), None, None)
    cwd[0] = "/two"
    await tool.execute("2", ValueParams(value="x"), None, None)
    assert [c.cwd for c in contexts if c] == ["/one", "/two"]
    unbound = wrap_tool_definition(definition)
    await unbound.execute("3", ValueParams(value="x"), None, None)
    assert contexts[-1] is None


async def test_define_tool_is_identity_and_reverse_conversion_ignores_ctx() -> None:
    tool = echo_tool()
    definition = tool_definition_from_agent_tool(tool)
    assert define_tool(definition) is definition
    assert definition.prompt_snippet is None and definition.render_call is None
    result = await definition.execute("1", ValueParams(value="v"), None, None, ToolContext(cwd="/"))
    assert [b.text for b in result.content if isinstance(b, TextContent)] == ["echoed: v"]


def test_agent_tool_label_defaults_to_name() -> None:
    assert AgentTool(name="read", description="", parameters={}).label == "read"


def test_registry_registration_activation_and_unknown_names() -> None:
    registry = ToolRegistry([echo_tool("read"), echo_tool("bash")])
    assert registry.active_tool_names() == ["read", "bash"]
    registry.set_active_tools(["bash", "nope", "read"])
    assert registry.active_tool_names() == ["bash", "read"]
    registry.set_active_tools(["bash"])
    registry.register_tool(echo_tool("read"))  # known name: replaced, not re-activated
    assert registry.active_tool_names() == ["bash"]
    registry.register_tool(echo_tool("grep"))  # new name: auto-activated
    assert registry.active_tool_names() == ["bash", "grep"]
    assert [t.name for t in registry.active_tools()] == ["bash", "grep"]
    assert [(i.name, i.active) for i in registry.all_tools()] == [
        ("read", False),
        ("bash", True),
        ("grep", True),
    ]


def test_registry_prompt_section() -> None:
    registry = ToolRegistry([echo_tool("plain")])
    assert registry.system_prompt_tools_section() == "Available tools:\n(none)"
    registry.register_tool(echo_tool("read", prompt_snippet="Read file\n   contents"))
    assert registry.system_prompt_tools_section() == "Available tools:\n- read: Read file contents"


async def test_registry_records_added_tool_names_for_additive_changes() -> None:
    registry = ToolRegistry()

    async def load(tid: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult[Any]:
        registry.register_tool(echo_tool("after_load"))
        return AgentToolResult[Any](content=[TextContent(text="loaded")], details=None)

    async def swap(tid: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult[Any]:
        registry.set_active_tools(["swap", "after_load"])
        registry.register_tool(echo_tool("another"))
        return AgentToolResult[Any](content=[TextContent(text="swapped")], details=None)

    registry.register_tool(
        AgentTool(name="load", description="", parameters=ValueParams, execute=load)
    )
    registry.register_tool(
        AgentTool(name="swap", description="", parameters=ValueParams, execute=swap)
    )
    batch = await execute_tool_calls(
        registry.active_tools(), assistant(("1", "load", {"value": "x"}))
    )
    assert batch.messages[0].added_tool_names == ["after_load"]
    assert registry.active_tool_names() == ["load", "swap", "after_load"]
    # "load" is removed by swap: nothing is recorded even though "another" was added
    batch = await execute_tool_calls(
        registry.active_tools(), assistant(("2", "swap", {"value": "x"}))
    )
    assert batch.messages[0].added_tool_names is None
    assert registry.active_tool_names() == ["swap", "after_load", "another"]


async def test_registry_context_factory_reaches_definitions() -> None:
    seen: list[str] = []

    async def execute(
        tid: str, params: Any, signal: Any, on_update: Any, ctx: ToolContext | None
    ) -> AgentToolResult[Any]:
        assert ctx is not None
        seen.append(ctx.cwd)
        return AgentToolResult[Any](content=[], details=None)

    registry = ToolRegistry(
        [
            ToolDefinition(
                name="t", label="T", description="", parameters=ValueParams, execute=execute
            )
        ],
        context_factory=lambda: ToolContext(cwd="/work"),
    )
    await execute_tool_calls(registry.active_tools(), assistant(("1", "t", {"value": "x"})))
    assert seen == ["/work"]
