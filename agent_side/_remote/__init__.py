"""Remote clients: backends whose work happens on a broker process (gRPC, SSH)."""

import os as _os

# As in ``broker``: gRPC's fork handlers crash children forked while gRPC threads run (a tool
# process may also run the broker core, which forks commands). Off before grpc is imported.
_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

# The wire package's import hides cryptography's DSA deprecation warning, drawn by asyncssh's own
# import (see opsbroker/__init__.py): imported before the SSH client imports asyncssh.
import opsbroker as _opsbroker  # noqa: F401
