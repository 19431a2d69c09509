"""The error hierarchy: stable codes, messages that name the operation and the path."""

from __future__ import annotations

import pickle

import pytest

import operations
from operations import ERROR_TYPES, OpsError, PolicyDenied, error_from_code


def test_every_code_is_unique_and_round_trips() -> None:
    assert len({cls.code for cls in ERROR_TYPES.values()}) == len(ERROR_TYPES)
    for code, cls in ERROR_TYPES.items():
        rebuilt = error_from_code(code, "stat", "/w/x", None)
        assert type(rebuilt) is cls
        assert rebuilt.reason == cls.default_reason


def test_message_names_operation_and_path() -> None:
    err = operations.EscapesRoot("read_file", "../etc/passwd")
    assert str(err) == "read_file '../etc/passwd': path escapes the workspace root"
    assert (
        str(operations.Timeout("exec", None, "timed out after 2 s")) == "exec: timed out after 2 s"
    )


def test_policy_denied_names_the_rule_and_pickles() -> None:
    err = PolicyDenied("write_file", "/w/.env", rule="deny_write: .env")
    assert "deny_write: .env" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again, PolicyDenied) and again.rule == err.rule and str(again) == str(err)


def test_unknown_code_becomes_plain_ops_error() -> None:
    err = error_from_code("from_the_future", "read_file", "/w/a", "new reason")
    assert type(err) is OpsError and "new reason" in str(err)


@pytest.mark.parametrize("name", operations.__all__)
def test_public_names_exist(name: str) -> None:
    assert hasattr(operations, name)
