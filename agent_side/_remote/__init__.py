"""Remote clients: backends whose work happens on a broker process (gRPC, SSH)."""

import os as _os

# As in ``broker``: gRPC's fork handlers crash children forked while gRPC threads run (a tool
# process may also run the broker core, which forks commands). Off before grpc is imported.
_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
