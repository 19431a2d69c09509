"""Front-ends: translations between a wire protocol and an ``operations.Backend`` (the core).

``grpc`` and ``ssh`` are the servers; ``_sshframe`` is the SSH subsystem's framing, sans I/O.
"""
