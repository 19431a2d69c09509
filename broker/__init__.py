"""The broker: the enforcement core and its front-ends.

General layout: the core modules (resolver, processes, policy, audit) import only ``operations``;
``_core`` composes them into one object that implements every ``operations`` protocol; front-ends
(gRPC, SSH) are thin translations to and from the wire and import the core, never the reverse.
"""

__all__: list[str] = []
