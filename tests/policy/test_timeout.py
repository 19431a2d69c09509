"""One timeout rule and one message: zero, negative and non-finite timeouts are refused alike,
by ``check_timeout``, the policy, the memory backend and the local broker, before anything runs."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker._core import Broker
from operations import (
    MAX_TIMEOUT_S,
    GuardedBackend,
    InMemoryOperations,
    InvalidArgument,
    Policy,
    check_timeout,
)

pytestmark = pytest.mark.anyio

NOT_A_TIMEOUT = "Invalid timeout: must be a finite number of seconds"
TOO_LONG = "Invalid timeout: maximum is 2147483.647 seconds"
BAD = [(0, NOT_A_TIMEOUT), (0.0, NOT_A_TIMEOUT), (-1, NOT_A_TIMEOUT), (-0.5, NOT_A_TIMEOUT)]
BAD += [(math.nan, NOT_A_TIMEOUT), (math.inf, NOT_A_TIMEOUT), (-math.inf, NOT_A_TIMEOUT)]
BAD += [(MAX_TIMEOUT_S + 0.001, TOO_LONG)]


@pytest.mark.parametrize(("bad", "reason"), BAD)
def test_check_timeout_refuses(bad: float, reason: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        check_timeout(bad, "exec", "/w")
    assert (info.value.op, info.value.path, info.value.reason) == ("exec", "/w", reason)
    assert str(info.value) == f"exec '/w': {reason}"


@pytest.mark.parametrize("good", [None, 0.001, 1, 120.0, MAX_TIMEOUT_S])
def test_check_timeout_accepts(good: float | None) -> None:
    assert check_timeout(good) == good


def test_check_timeout_refuses_what_is_not_a_number() -> None:
    for bad in (True, "5"):
        with pytest.raises(InvalidArgument, match=NOT_A_TIMEOUT):
            check_timeout(bad)  # type: ignore[arg-type]


@pytest.fixture(params=["memory", "local", "memory-guarded", "local-guarded"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[object]:
    name = str(request.param)
    inner: InMemoryOperations | Broker
    if name.startswith("memory"):
        inner = InMemoryOperations(root=str(tmp_path))
        inner.commands.register("echo ran", output="ran\n")
    else:
        inner = Broker(str(tmp_path))
    async with inner:
        yield GuardedBackend(inner, Policy(), close_inner=False) if "guarded" in name else inner


@pytest.mark.parametrize(("bad", "reason"), BAD)
async def test_backends_refuse_with_the_one_message(
    backend: InMemoryOperations, tmp_path: Path, bad: float, reason: str
) -> None:
    output: list[bytes] = []
    with pytest.raises(InvalidArgument) as info:
        await backend.exec("echo ran", str(tmp_path), on_data=output.append, timeout=bad)
    assert info.value.reason == reason
    assert output == []  # refused before anything ran
