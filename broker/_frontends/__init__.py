"""The broker's front-ends: thin translations between a wire protocol and the core.

``grpc`` and ``ssh`` are the servers; ``_sshframe`` is the SSH subsystem's framing, sans I/O.
"""
