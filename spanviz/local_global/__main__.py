"""``python -m spanviz.local_global``: print the LS masks of a small example (see ``core.main``)."""

from spanviz.local_global.core import main

main()
