"""``python -m spanviz.local_global``: print the LS masks of a small example (:func:`demos.print_masks`)."""

from spanviz.local_global.demos import print_masks

print_masks()
