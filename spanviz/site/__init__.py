"""The notebooks as a static explorable (``spanviz site OUT``): :func:`build_site`."""

from spanviz.site.build import build_site

__all__ = ["build_site"]
