"""The agent side: the tool runtime, the built-in tools, and remote clients for the broker.

General layout: ``_connect`` picks a backend from a URL; ``_remote/`` holds the gRPC and SSH
clients (each implements every ``operations`` protocol); the tool runtime and the built-in tools
only ever see ``operations`` interfaces, so they run unchanged on every backend.
"""

from ._connect import connect as connect
from ._connect import register_scheme as register_scheme

__all__ = ["connect", "register_scheme"]
