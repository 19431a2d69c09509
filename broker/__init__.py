"""The broker: the enforcement core and its front-ends.

General layout: the core modules (resolver, processes, policy, audit) import only ``operations``;
``_core`` composes them into one object that implements every ``operations`` protocol; front-ends
(gRPC, SSH) are thin translations to and from the wire and import the core, never the reverse.
``_guard.Enforcement`` (policy from ``operations``, ``_audit``, ``_landlock``) wraps the core once
per connection, so every front-end meets the same policy and audit.
"""

from ._audit import AuditError as AuditError
from ._audit import AuditLog as AuditLog
from ._audit import AuditUnavailable as AuditUnavailable
from ._audit import verify_files as verify_files
from ._guard import Enforcement as Enforcement
from ._landlock import Sandbox as Sandbox
from ._landlock import SandboxUnavailable as SandboxUnavailable
from ._landlock import landlock_abi as landlock_abi

__all__ = [
    "AuditError",
    "AuditLog",
    "AuditUnavailable",
    "Enforcement",
    "Sandbox",
    "SandboxUnavailable",
    "landlock_abi",
    "verify_files",
]
