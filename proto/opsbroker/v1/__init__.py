"""Version 1 of the wire contract, the one package the broker and its clients both import.

``broker_pb2`` and ``broker_pb2_grpc`` (generated: the messages and the gRPC service), ``codec``
(wire messages to and from ``operations`` values, and the size limits every transport shares) and
``sshframe`` (the framing of the ``opsbroker`` SSH subsystem, sans I/O).
"""
