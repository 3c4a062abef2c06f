"""``python -m spanviz.cli``: the ``spanviz`` command (as ``python -m spanviz``)."""

import sys

from spanviz.cli.main import main

sys.exit(main())
