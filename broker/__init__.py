"""The broker: the enforcement core and its front-ends.

General layout: the core modules (resolver, processes, policy, audit) import only ``operations``;
``_core`` composes them into one object that implements every ``operations`` protocol; front-ends
(``_frontends/grpc.py``, SSH) are thin translations to and from the wire and import the core,
never the reverse; ``_serve`` runs front-ends over a backend, and ``_cli`` is the command line.
"""

from ._serve import BrokerConfig as BrokerConfig
from ._serve import BrokerServer as BrokerServer
from ._serve import serve as serve

__all__ = ["BrokerConfig", "BrokerServer", "serve"]
