"""Version 1 of the wire contract: ``broker_pb2`` (messages) and ``broker_pb2_grpc`` (service)."""
