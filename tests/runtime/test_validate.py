"""Argument validation against the reference's tables (pi-tools.md 5 and 7.5)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field, field_validator

from agent_side import JsonNumber, Tool, ToolCall, ToolValidationError, validate_tool_arguments
from agent_side.loop import validate_tool_call


class ReadParams(BaseModel):
    path: str = Field(description="Path to the file to read")
    offset: JsonNumber | None = Field(default=None, description="Line number to start from")
    limit: JsonNumber | None = Field(default=None, description="Maximum number of lines")


class GrepParams(BaseModel):
    pattern: str
    ignoreCase: bool | None = None


class Replacement(BaseModel):
    oldText: str
    newText: str


class EditParams(BaseModel):
    path: str
    edits: list[Replacement]


def check(parameters: Any, args: dict[str, Any], name: str = "read") -> Any:
    tool = Tool(name=name, description="", parameters=parameters)
    value = validate_tool_arguments(tool, ToolCall(id="c", name=name, arguments=args))
    return value.model_dump(exclude_unset=True) if isinstance(value, BaseModel) else value


def failure(parameters: Any, args: dict[str, Any], name: str = "read") -> str:
    with pytest.raises(ToolValidationError) as caught:
        check(parameters, args, name)
    return str(caught.value)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"path": "a", "offset": "5", "limit": "10"}, {"path": "a", "offset": 5, "limit": 10}),
        ({"path": 123}, {"path": "123"}),
        ({"path": None}, {"path": "null"}),
        ({"path": "a", "offset": None}, {"path": "a"}),
        ({"path": "a", "offset": True}, {"path": "a", "offset": 1}),
        ({"path": "a", "offset": ""}, {"path": "a", "offset": 0}),
        ({"path": "a", "offset": " 5 "}, {"path": "a", "offset": 5}),
        ({"path": "a", "offset": "1e3"}, {"path": "a", "offset": 1000}),
        ({"path": "a", "offset": "0x10"}, {"path": "a", "offset": 16}),
        ({"path": "a", "offset": "2.5"}, {"path": "a", "offset": 2.5}),
    ],
)
def test_read_coercions(args: dict[str, Any], expected: dict[str, Any]) -> None:
    result = check(ReadParams, args)
    assert result == expected
    assert [type(v) for v in result.values()] == [type(v) for v in expected.values()]


def test_extra_properties_pass() -> None:
    tool = Tool(
        name="plain",
        description="",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}},
    )
    assert validate_tool_arguments(
        tool, ToolCall(id="c", name="plain", arguments={"path": "a", "extra": 1})
    ) == {
        "path": "a",
        "extra": 1,
    }
    assert check(ReadParams, {"path": "a", "extra": 1}) == {"path": "a"}


def test_full_error_text_byte_for_byte() -> None:
    assert failure(ReadParams, {"path": "a", "offset": "abc"}) == (
        'Validation failed for tool "read":\n  - offset: must be number\n\n'
        'Received arguments:\n{\n  "path": "a",\n  "offset": "abc"\n}'
    )


def test_missing_required_and_wrong_type_lines_in_keyword_order() -> None:
    assert failure(ReadParams, {}) == (
        'Validation failed for tool "read":\n  - path: must have required properties path\n\n'
        "Received arguments:\n{}"
    )
    text = failure(ReadParams, {"offset": "abc"})
    assert text.splitlines()[1:3] == [
        "  - path: must have required properties path",
        "  - offset: must be number",
    ]


@pytest.mark.parametrize("value", ["true", 1, "1", "TRUE"])
def test_grep_boolean_coercions(value: Any) -> None:
    assert check(GrepParams, {"pattern": "x", "ignoreCase": value}, "grep")["ignoreCase"] is True


def test_grep_boolean_rejects_yes() -> None:
    assert "  - ignoreCase: must be boolean\n" in failure(
        GrepParams, {"pattern": "x", "ignoreCase": "yes"}, "grep"
    )


def test_edit_array_rules() -> None:
    assert check(EditParams, {"path": "p", "edits": {"oldText": "a", "newText": "b"}}, "edit") == {
        "path": "p",
        "edits": [{"oldText": "a", "newText": "b"}],
    }
    assert check(EditParams, {"path": "p", "edits": [{"oldText": 1, "newText": None}]}, "edit")[
        "edits"
    ] == [{"oldText": "1", "newText": "null"}]
    assert check(EditParams, {"path": "p", "edits": []}, "edit") == {"path": "p", "edits": []}
    assert "  - edits.0: must be object\n" in failure(
        EditParams, {"path": "p", "edits": "not json"}, "edit"
    )
    assert "  - edits.0.newText: must have required properties newText\n" in failure(
        EditParams, {"path": "p", "edits": [{"oldText": "x"}]}, "edit"
    )


def test_arguments_are_never_mutated() -> None:
    args: dict[str, Any] = {"path": "p", "edits": {"oldText": 1, "newText": "b"}, "x": None}
    call = ToolCall(id="c", name="edit", arguments=args)
    before = repr(call.arguments)
    validate_tool_arguments(Tool(name="edit", description="", parameters=EditParams), call)
    assert repr(call.arguments) == before


def test_received_arguments_are_json_stringify_output() -> None:
    text = failure(
        ReadParams, {"path": 'é\n"', "offset": "abc", "n": [1.0, 2.5, None, True, {}], "e": []}
    )
    assert text.endswith(
        'Received arguments:\n{\n  "path": "é\\n\\"",\n  "offset": "abc",\n  "n": [\n    1,\n    2.5,\n'
        '    null,\n    true,\n    {}\n  ],\n  "e": []\n}'
    )


def test_optional_nulls_dropped_nullable_kept() -> None:
    schema = {
        "type": "object",
        "properties": {
            "offset": {"type": "number"},
            "nullable": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "metadata": {"type": "object", "properties": {"enabled": {"type": "boolean"}}},
        },
    }
    tool = Tool(name="t", description="", parameters=schema)
    args = {"offset": None, "nullable": None, "metadata": {"enabled": None}}
    assert validate_tool_arguments(tool, ToolCall(id="c", name="t", arguments=args)) == {
        "nullable": None,
        "metadata": {},
    }


def plain(schema: dict[str, Any], value: Any) -> Any:
    tool = Tool(
        name="plain",
        description="",
        parameters={"type": "object", "properties": {"v": schema}, "required": ["v"]},
    )
    return validate_tool_arguments(tool, ToolCall(id="c", name="plain", arguments={"v": value}))[
        "v"
    ]


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [
        ({"type": "number"}, "42", 42),
        ({"type": "number"}, True, 1),
        ({"type": "number"}, None, 0),
        ({"type": "integer"}, "42", 42),
        ({"type": "boolean"}, "true", True),
        ({"type": "boolean"}, "false", False),
        ({"type": "boolean"}, 1, True),
        ({"type": "boolean"}, 0, False),
        ({"type": "string"}, None, ""),
        ({"type": "string"}, True, "true"),
        ({"type": "string"}, 1.5, "1.5"),
        ({"type": "null"}, "", None),
        ({"type": "null"}, 0, None),
        ({"type": "null"}, False, None),
        ({"type": ["number", "string"]}, "1", "1"),
        ({"type": ["boolean", "number"]}, "1", 1),
        ({"anyOf": [{"type": "number"}, {"type": "null"}]}, "42", 42),
        ({"anyOf": [{"type": "string"}, {"type": "null"}]}, None, None),
        ({"oneOf": [{"type": "string"}, {"type": "null"}]}, None, None),
        ({"type": ["array", "null"], "items": {"type": "string"}}, None, None),
    ],
)
def test_plain_json_schema_coercion_table(
    schema: dict[str, Any], value: Any, expected: Any
) -> None:
    result = plain(schema, value)
    assert result == expected and type(result) is type(expected)


@pytest.mark.parametrize(
    ("schema", "value", "line"),
    [
        ({"type": "boolean"}, "1", "  - v: must be boolean"),
        ({"type": "boolean"}, "0", "  - v: must be boolean"),
        ({"type": "null"}, "null", "  - v: must be null"),
        ({"type": "integer"}, "42.1", "  - v: must be integer"),
        ({"type": ["boolean", "number"]}, "x", "  - v: must be either boolean or number"),
        (
            {"type": "string", "enum": ["a", "b"]},
            "c",
            "  - v: must be equal to one of the allowed values",
        ),
    ],
)
def test_plain_json_schema_rejections(schema: dict[str, Any], value: Any, line: str) -> None:
    with pytest.raises(ToolValidationError) as caught:
        plain(schema, value)
    assert str(caught.value).startswith('Validation failed for tool "plain":\n' + line + "\n")


def test_ref_nullable_null_is_preserved() -> None:
    schema = {
        "type": "object",
        "properties": {"v": {"$ref": "#/$defs/MaybeString"}},
        "$defs": {"MaybeString": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
    }
    tool = Tool(name="t", description="", parameters=schema)
    assert validate_tool_arguments(tool, ToolCall(id="c", name="t", arguments={"v": None})) == {
        "v": None
    }


def test_ref_target_is_checked() -> None:
    schema = {
        "type": "object",
        "properties": {"v": {"$ref": "#/$defs/N"}},
        "$defs": {"N": {"type": "number"}},
    }
    tool = Tool(name="t", description="", parameters=schema)
    assert validate_tool_arguments(tool, ToolCall(id="c", name="t", arguments={"v": "7"})) == {
        "v": 7
    }
    with pytest.raises(ToolValidationError, match="  - v: must be number"):
        validate_tool_arguments(tool, ToolCall(id="c", name="t", arguments={"v": "x"}))


def test_typebox_rules_apply_to_models_ajv_rules_to_plain_schemas() -> None:
    class Flag(BaseModel):
        v: bool

    assert check(Flag, {"v": "1"}, "flag") == {"v": True}
    with pytest.raises(ToolValidationError):
        plain({"type": "boolean"}, "1")
    # null for a required string: TypeBox stringifies, AJV gives ""
    assert check(EditParams, {"path": None, "edits": []}, "edit")["path"] == "null"
    assert plain({"type": "string"}, None) == ""


def test_count_string_becomes_number() -> None:
    class Count(BaseModel):
        count: JsonNumber

    assert check(Count, {"count": "42"}, "count") == {"count": 42}


def test_pydantic_only_constraints_report_in_the_same_format() -> None:
    class Named(BaseModel):
        name: str

        @field_validator("name")
        @classmethod
        def no_spaces(cls, value: str) -> str:
            if " " in value:
                raise ValueError("no spaces allowed")
            return value

    text = failure(Named, {"name": "a b"}, "named")
    assert text == (
        'Validation failed for tool "named":\n  - name: Value error, no spaces allowed\n\n'
        'Received arguments:\n{\n  "name": "a b"\n}'
    )


def test_schema_constraints_use_typebox_words() -> None:
    class Bounded(BaseModel):
        name: str = Field(min_length=2)
        count: int = Field(ge=1)

    text = failure(Bounded, {"name": "a", "count": 0}, "bounded")
    assert text.splitlines()[1:3] == [
        "  - name: must not have fewer than 2 characters",
        "  - count: must be >= 1",
    ]


def test_anyof_failure_lists_every_arm() -> None:
    class Either(BaseModel):
        v: int | list[int]

    lines = failure(Either, {"v": {"a": 1}}, "either").splitlines()[1:4]
    assert lines == [
        "  - v: must be integer",
        "  - v: must be array",
        "  - v: must match a schema in anyOf",
    ]


def test_at_most_eight_issues() -> None:
    schema = {
        "type": "object",
        "required": [f"p{i}" for i in range(3)],
        "properties": {f"n{i}": {"type": "number"} for i in range(12)},
    }
    tool = Tool(name="t", description="", parameters=schema)
    with pytest.raises(ToolValidationError) as caught:
        validate_tool_arguments(
            tool, ToolCall(id="c", name="t", arguments={f"n{i}": "x" for i in range(12)})
        )
    assert len(caught.value.issues) == 8
    assert caught.value.issues[0] == ("p0", "must have required properties p0, p1, p2")


def test_root_path_and_unknown_error() -> None:
    tool = Tool(name="t", description="", parameters={"type": "object", "not": {}})
    with pytest.raises(ToolValidationError) as caught:
        validate_tool_arguments(tool, ToolCall(id="c", name="t", arguments={}))
    assert "  - root: must not be valid\n" in str(caught.value)
    assert str(ToolValidationError("t", [], {})) == (
        'Validation failed for tool "t":\nUnknown validation error\n\nReceived arguments:\n{}'
    )


def test_validate_tool_call_quotes_the_name() -> None:
    with pytest.raises(LookupError, match=r'^Tool "nope" not found$'):
        validate_tool_call([], ToolCall(id="c", name="nope", arguments={}))
    tool = Tool(name="read", description="", parameters=ReadParams)
    assert (
        validate_tool_call([tool], ToolCall(id="c", name="read", arguments={"path": "a"})).path
        == "a"
    )
