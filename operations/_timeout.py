"""The one rule for a command's timeout, and its one message, on every backend and front-end.

A timeout is a number of seconds, finite and greater than zero, at most :data:`MAX_TIMEOUT_S`;
``None`` means none (the policy's ``exec.default_timeout`` applies where there is a policy). Zero
and negative timeouts are refused alike. The texts are the reference bash tool's own, so the tool
shows the same sentence whichever layer refused.
"""

from __future__ import annotations

import math

from ._errors import InvalidArgument

__all__ = ["MAX_TIMEOUT_S", "check_timeout"]

MAX_TIMEOUT_S = 2147483.647
"""Largest timeout accepted (the reference's limit: 2**31-1 milliseconds)."""

NOT_A_TIMEOUT = "Invalid timeout: must be a finite number of seconds"
TOO_LONG = f"Invalid timeout: maximum is {MAX_TIMEOUT_S} seconds"


def check_timeout(timeout: float | None, op: str = "exec", path: str | None = None) -> float | None:
    """Return ``timeout`` if it is a valid command timeout in seconds, or ``None`` for none.

    Args:
        timeout: the caller's timeout in seconds, or ``None``.
        op: the operation named in the error (``"exec"``, ``"exec_powershell"``).
        path: the working directory named in the error, if any.

    Raises:
        InvalidArgument: when ``timeout`` is not a number, not finite, zero or negative
            (``reason`` is ``"Invalid timeout: must be a finite number of seconds"``), or above
            :data:`MAX_TIMEOUT_S` (``"Invalid timeout: maximum is 2147483.647 seconds"``).
    """
    if timeout is None:
        return None
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise InvalidArgument(op, path, NOT_A_TIMEOUT)
    if timeout > MAX_TIMEOUT_S:
        raise InvalidArgument(op, path, TOO_LONG)
    return timeout
