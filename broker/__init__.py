"""The broker: the enforcement core and its front-ends.

General layout: the core modules (``_resolver`` for confinement over ``_openat2``, ``_treewalk``
and ``_rg`` for glob and search, then processes, policy, audit) import only ``operations``;
``_core`` composes them into :class:`Broker`, one object that implements every ``operations``
protocol; front-ends (``_frontends/grpc.py``, SSH) are thin translations to and from the wire and
import the core, never the reverse; ``_serve`` runs front-ends over a backend; ``_cli`` is the
command line.
"""

from ._core import Broker as Broker
from ._resolver import Root as Root
from ._serve import BrokerConfig as BrokerConfig
from ._serve import BrokerServer as BrokerServer
from ._serve import serve as serve

__all__ = ["Broker", "BrokerConfig", "BrokerServer", "Root", "serve"]
