"""The built-in tools: read, write, edit, ls, find, grep, bash, powershell.

Each ``create_<name>_tool(cwd, operations=..., ...)`` returns an :class:`~agent_side.AgentTool`
(``create_<name>_tool_definition`` the :class:`~agent_side.ToolDefinition` behind it). A tool only
calls the ``operations`` interfaces it is typed with (``read`` a
:class:`~operations.ReadOperations`, ...; a set of tools :class:`ToolOperations`), so it behaves
the same on the memory, local, gRPC and SSH backends; without ``operations`` it uses the
``local:`` backend rooted at ``cwd``.

General layout: one module per tool; shared pieces are ``_truncate`` (limits and notices),
``_output`` (command output streaming), ``_paths`` (what a path argument means), ``_edit_diff``
(matching and diffs), ``_image`` (sniffing and fitting images), ``_errors`` (failure texts) and
``_shell`` (bash and powershell runs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._tool import AgentTool, ToolDefinition, wrap_tool_definition
from ._edit_diff import generate_diff_string as generate_diff_string
from ._edit_diff import generate_unified_patch as generate_unified_patch
from ._output import OutputAccumulator as OutputAccumulator
from ._shell import SpawnContext as SpawnContext
from ._shell import SpawnHook as SpawnHook
from ._truncate import DEFAULT_MAX_BYTES as DEFAULT_MAX_BYTES
from ._truncate import DEFAULT_MAX_LINES as DEFAULT_MAX_LINES
from ._truncate import GREP_MAX_LINE_LENGTH as GREP_MAX_LINE_LENGTH
from ._truncate import TruncationResult as TruncationResult
from ._truncate import format_size as format_size
from ._truncate import truncate_head as truncate_head
from ._truncate import truncate_line as truncate_line
from ._truncate import truncate_tail as truncate_tail
from ._workspace import LocalOperations
from ._workspace import PowerShellHost as PowerShellHost
from ._workspace import ToolOperations as ToolOperations
from .bash import create_bash_tool as create_bash_tool
from .bash import create_bash_tool_definition as create_bash_tool_definition
from .edit import create_edit_tool as create_edit_tool
from .edit import create_edit_tool_definition as create_edit_tool_definition
from .edit import prepare_edit_arguments as prepare_edit_arguments
from .find import create_find_tool as create_find_tool
from .find import create_find_tool_definition as create_find_tool_definition
from .find import relativize_find_result_path as relativize_find_result_path
from .grep import create_grep_tool as create_grep_tool
from .grep import create_grep_tool_definition as create_grep_tool_definition
from .ls import create_ls_tool as create_ls_tool
from .ls import create_ls_tool_definition as create_ls_tool_definition
from .powershell import create_powershell_tool as create_powershell_tool
from .powershell import create_powershell_tool_definition as create_powershell_tool_definition
from .read import create_read_tool as create_read_tool
from .read import create_read_tool_definition as create_read_tool_definition
from .write import create_write_tool as create_write_tool
from .write import create_write_tool_definition as create_write_tool_definition

__all__ = [
    "ALL_TOOL_NAMES",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_LINES",
    "GREP_MAX_LINE_LENGTH",
    "OutputAccumulator",
    "PowerShellHost",
    "SpawnContext",
    "SpawnHook",
    "ToolOperations",
    "TruncationResult",
    "create_all_tool_definitions",
    "create_all_tools",
    "create_bash_tool",
    "create_bash_tool_definition",
    "create_coding_tool_definitions",
    "create_coding_tools",
    "create_edit_tool",
    "create_edit_tool_definition",
    "create_find_tool",
    "create_find_tool_definition",
    "create_grep_tool",
    "create_grep_tool_definition",
    "create_ls_tool",
    "create_ls_tool_definition",
    "create_powershell_tool",
    "create_powershell_tool_definition",
    "create_read_only_tool_definitions",
    "create_read_only_tools",
    "create_read_tool",
    "create_read_tool_definition",
    "create_tool",
    "create_tool_definition",
    "create_write_tool",
    "create_write_tool_definition",
    "format_size",
    "generate_diff_string",
    "generate_unified_patch",
    "prepare_edit_arguments",
    "relativize_find_result_path",
    "truncate_head",
    "truncate_line",
    "truncate_tail",
]

_FACTORIES: dict[str, Callable[..., ToolDefinition[Any, Any]]] = {
    "read": create_read_tool_definition,
    "bash": create_bash_tool_definition,
    "powershell": create_powershell_tool_definition,
    "edit": create_edit_tool_definition,
    "write": create_write_tool_definition,
    "grep": create_grep_tool_definition,
    "find": create_find_tool_definition,
    "ls": create_ls_tool_definition,
}
ALL_TOOL_NAMES = tuple(_FACTORIES)
"""Every built-in tool name, in the reference's order."""

_CODING = ("read", "bash", "edit", "write")
_READ_ONLY = ("read", "grep", "find", "ls")


def create_tool_definition(
    name: str,
    cwd: str,
    operations: ToolOperations | None = None,
    options: Mapping[str, object] | None = None,
) -> ToolDefinition[Any, Any]:
    """The definition of the built-in tool ``name``; ``options`` are that tool's keyword options.

    Raises:
        ValueError: ``Unknown tool name: <name>``.
    """
    factory = _FACTORIES.get(name)
    if factory is None:
        raise ValueError(f"Unknown tool name: {name}")
    return factory(cwd, operations=operations, **dict(options or {}))


def create_tool(
    name: str,
    cwd: str,
    operations: ToolOperations | None = None,
    options: Mapping[str, object] | None = None,
) -> AgentTool[Any, Any]:
    """:func:`create_tool_definition`, wrapped for the loop."""
    definition = create_tool_definition(name, cwd, operations, options)
    tool = wrap_tool_definition(definition)
    if name in ("bash", "powershell"):
        tool.prompt_snippet = definition.prompt_snippet
        tool.prompt_guidelines = definition.prompt_guidelines
    return tool


def _definitions(
    names: tuple[str, ...],
    cwd: str,
    operations: ToolOperations | None,
    options: Mapping[str, Mapping[str, object]] | None,
) -> list[ToolDefinition[Any, Any]]:
    if operations is None:
        operations = LocalOperations(cwd)  # one backend shared by every tool of the set
    opts = options or {}
    return [create_tool_definition(n, cwd, operations, opts.get(n)) for n in names]


def _tools(
    names: tuple[str, ...],
    cwd: str,
    operations: ToolOperations | None,
    options: Mapping[str, Mapping[str, object]] | None,
) -> list[AgentTool[Any, Any]]:
    if operations is None:
        operations = LocalOperations(cwd)
    opts = options or {}
    return [create_tool(n, cwd, operations, opts.get(n)) for n in names]


def create_all_tool_definitions(
    cwd: str,
    operations: ToolOperations | None = None,
    options: Mapping[str, Mapping[str, object]] | None = None,
) -> list[ToolDefinition[Any, Any]]:
    """All eight definitions over one ``operations``; ``options`` maps a tool name to its options."""
    return _definitions(ALL_TOOL_NAMES, cwd, operations, options)


def create_all_tools(
    cwd: str,
    operations: ToolOperations | None = None,
    options: Mapping[str, Mapping[str, object]] | None = None,
) -> list[AgentTool[Any, Any]]:
    """All eight tools over one ``operations`` (the ``local:`` backend at ``cwd`` by default)."""
    return _tools(ALL_TOOL_NAMES, cwd, operations, options)


def create_coding_tool_definitions(
    cwd: str,
    operations: ToolOperations | None = None,
    options: Mapping[str, Mapping[str, object]] | None = None,
) -> list[ToolDefinition[Any, Any]]:
    """``read``, ``bash``, ``edit``, ``write``: the default active set."""
    return _definitions(_CODING, cwd, operations, options)


def create_coding_tools(
    cwd: str,
    operations: ToolOperations | None = None,
    options: Mapping[str, Mapping[str, object]] | None = None,
) -> list[AgentTool[Any, Any]]:
    """``read``, ``bash``, ``edit``, ``write``, wrapped for the loop."""
    return _tools(_CODING, cwd, operations, options)


def create_read_only_tool_definitions(
    cwd: str,
    operations: ToolOperations | None = None,
    options: Mapping[str, Mapping[str, object]] | None = None,
) -> list[ToolDefinition[Any, Any]]:
    """``read``, ``grep``, ``find``, ``ls``: tools that never change the workspace."""
    return _definitions(_READ_ONLY, cwd, operations, options)


def create_read_only_tools(
    cwd: str,
    operations: ToolOperations | None = None,
    options: Mapping[str, Mapping[str, object]] | None = None,
) -> list[AgentTool[Any, Any]]:
    """``read``, ``grep``, ``find``, ``ls``, wrapped for the loop."""
    return _tools(_READ_ONLY, cwd, operations, options)
