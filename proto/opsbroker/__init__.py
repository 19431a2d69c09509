"""The wire package both the broker and its clients import.

``v1``: the wire contract (the generated code of ``v1/broker.proto``, ``codec``, ``sshframe``);
``malloc``: allocator tuning for a process at either end that streams large messages;
``grpccore``: the grpc core settings the commands run with, set before grpc is imported; ``cli``:
the ``opsbroker`` command line, composed here from the subcommands of ``broker`` and
``agent_side`` (only ``cli`` imports either half).
"""

import warnings

# asyncssh names cryptography's DSA classes as it imports, and cryptography (51 and later) warns
# that DSA is deprecated at each name: five lines on stderr at every start of every opsbroker
# command, about asyncssh's import rather than any key in use, and nothing a user can act on.
# Hidden for asyncssh's modules only; every other warning shows as before.
warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh\.")
