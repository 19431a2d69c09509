"""The sandboxd wire (agent-sandbox KEP-539.2): ``process_pb2`` and ``process_pb2_grpc``, generated
from ``process.proto`` (package ``process.v1``), served by ``broker._frontends.sandboxd``."""
