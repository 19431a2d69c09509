"""``python -m opsbroker``: the ``opsbroker`` command line (:mod:`opsbroker.cli`)."""

import sys

from opsbroker.cli import main

sys.exit(main())
