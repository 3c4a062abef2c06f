"""``python -m spanviz``: the ``spanviz`` command (see :mod:`spanviz.cli`)."""

import sys

from spanviz.cli import main

sys.exit(main())
