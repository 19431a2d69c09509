"""The broker: the enforcement core and its front-ends.

General layout: the core modules (``_resolver`` for confinement over ``_openat2``, ``_treewalk``
and ``_rg`` for glob and search, then processes, policy, audit) import only ``operations``;
``_core`` composes them into :class:`Broker`, one object that implements every ``operations``
protocol; front-ends (gRPC, SSH) are thin translations to and from the wire and import the core,
never the reverse. ``_guard.Enforcement`` (the ``operations`` policy, ``_audit``, ``_landlock``)
wraps the core once per connection, so every front-end meets the same policy and audit.
"""

from ._audit import AuditError as AuditError
from ._audit import AuditLog as AuditLog
from ._audit import AuditUnavailable as AuditUnavailable
from ._audit import verify_files as verify_files
from ._core import Broker as Broker
from ._guard import Enforcement as Enforcement
from ._landlock import Sandbox as Sandbox
from ._landlock import SandboxUnavailable as SandboxUnavailable
from ._landlock import landlock_abi as landlock_abi
from ._resolver import Root as Root

__all__ = [
    "AuditError",
    "AuditLog",
    "AuditUnavailable",
    "Broker",
    "Enforcement",
    "Root",
    "Sandbox",
    "SandboxUnavailable",
    "landlock_abi",
    "verify_files",
]
