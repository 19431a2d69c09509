"""The wire package both the broker and its clients import.

``v1``: the wire contract (the generated code of ``v1/broker.proto``, ``codec``, ``sshframe``);
``malloc``: allocator tuning for a process at either end that streams large messages; ``cli``:
the ``opsbroker`` command line, composed here from the subcommands of ``broker`` and
``agent_side`` (only ``cli`` imports either half).
"""
