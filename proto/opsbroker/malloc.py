"""glibc allocator settings for a process that streams large buffers: either end of the wire.

A file streamed to a client passes through many short-lived buffers of 256 KiB and more (the
piece read, its protobuf message, its frame, and asyncssh's copies of each SSH packet: about ten
per piece). With glibc's defaults a buffer that size is either mapped fresh (``mmap``, above the
threshold of 128 KiB that glibc raises only as such maps are freed) or carved from a heap whose
free top is given back to the system as soon as it exceeds twice that threshold. Either way each
buffer lands on pages the kernel must fault in and zero again: a 64 MiB read over SSH cost
140,000 page faults and more system time than work (71 MB/s). With the settings below the heap
keeps those pages and hands them out again: no faults, 2.5x the throughput.

Both ends move the same buffers, so this lives in the wire package: ``opsbroker serve`` tunes the
broker, and the SSH and gRPC backends tune a client that asks for it (``tune_allocator=True``).

Only glibc is tuned; with another C library (musl) nothing changes. An operator who set
``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or ``GLIBC_TUNABLES`` keeps their choice.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import platform
from typing import Final

__all__ = ["MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "tune_allocator"]

log = logging.getLogger("opsbroker.malloc")

MMAP_THRESHOLD_BYTES: Final = 4 * 1024 * 1024
"""Allocations below this come from the heap and are reused: a stream's 256 KiB pieces and the
copies made of them, up to a gRPC message (4 MiB); a whole large file read at once is mapped."""

TRIM_THRESHOLD_BYTES: Final = 32 * 1024 * 1024
"""Free heap kept before it is returned to the system: more than the churn of a few streams at
once (an SSH channel can have its 8 MiB window in flight), so steady streaming never faults."""

_M_TRIM_THRESHOLD: Final = -1  # mallopt parameter numbers, from glibc's <malloc.h>
_M_MMAP_THRESHOLD: Final = -3

_OPERATOR_SETTINGS: Final = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


@functools.cache
def tune_allocator() -> bool:
    """Set glibc's mmap and trim thresholds for streaming (see the module docstring).

    Call it early in a process that moves large reads: ``opsbroker serve`` does, and so do the
    SSH and gRPC backends when they connect if given ``tune_allocator=True``. The settings are
    process-wide, which is why nothing does it on import; calls after the first do nothing and
    return the first's result.

    Returns:
        whether the settings were applied: ``False`` off glibc, or when the operator set them.
    """
    if platform.libc_ver()[0] != "glibc":
        return False
    if any(name in os.environ for name in _OPERATOR_SETTINGS):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    applied = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
    if not applied:
        log.warning("could not set the allocator's thresholds; large reads will be slower")
    return applied
