"""The broker: the enforcement core and its front-ends.

General layout: the core modules (``_resolver`` for confinement over ``_openat2``, ``_treewalk``
and ``_rg`` for glob and search, then processes, policy, audit) import only ``operations``;
``_core`` composes them into :class:`Broker`, one object that implements every ``operations``
protocol; front-ends (gRPC, SSH) are thin translations to and from the wire and import the core,
never the reverse.
"""

from ._core import Broker as Broker
from ._resolver import Root as Root

__all__ = ["Broker", "Root"]
