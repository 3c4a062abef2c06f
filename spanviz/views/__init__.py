"""Transitional: the local/global panel's view until it moves into spanviz.local_global."""

from spanviz.views.local_global import head_labels, head_masks

__all__ = ["head_labels", "head_masks"]
