"""The broker: the enforcement core and its front-ends.

General layout: the core modules (``_resolver`` for confinement over ``_openat2``, ``_treewalk``
and ``_rg`` for glob and search, then processes, policy, audit) import only ``operations``;
``_core`` composes them into :class:`Broker`, one object that implements every ``operations``
protocol; front-ends (``_frontends/grpc.py``, SSH) are thin translations to and from the wire and
import the core, never the reverse; ``_serve`` runs front-ends over a backend; ``_cli`` is the
command line.
"""

import os as _os

# The broker forks commands from a process where gRPC threads run; gRPC's own fork handlers then
# crash the child now and then. Turn them off before anything imports grpc (an explicit setting
# in the environment wins).
_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from ._core import Broker as Broker
from ._resolver import Root as Root
from ._serve import BrokerConfig as BrokerConfig
from ._serve import BrokerServer as BrokerServer
from ._serve import serve as serve

__all__ = ["Broker", "BrokerConfig", "BrokerServer", "Root", "serve"]
