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


def _every_error_type(base: type[OpsError] = OpsError) -> list[type[OpsError]]:
    found: list[type[OpsError]] = []
    for cls in base.__subclasses__():
        found += [cls, *_every_error_type(cls)]
    return found


@pytest.mark.parametrize("cls", _every_error_type(), ids=lambda c: c.__name__)
def test_every_error_type_has_its_own_grpc_status(cls: type[OpsError]) -> None:
    """A type missing from the table answers gRPC UNKNOWN (as DirectoryNotEmpty did)."""
    import grpc

    from broker._frontends._grpcwire import STATUS, status_of

    assert cls in STATUS, f"{cls.__name__} has no entry in the gRPC status table"
    assert status_of(cls("remove", "/w/d")) not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.OK)


def test_the_hierarchy_walk_sees_every_public_error() -> None:
    assert set(ERROR_TYPES.values()) <= set(_every_error_type())
