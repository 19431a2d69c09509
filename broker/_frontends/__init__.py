"""Front-ends: translations between a wire protocol and an ``operations.Backend`` (the core).

``grpc`` and ``ssh`` are the servers; the SSH subsystem's framing is the wire package's
:mod:`opsbroker.v1.sshframe`, which the client imports too.
"""
