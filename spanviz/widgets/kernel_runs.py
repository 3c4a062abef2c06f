"""The runs training in this kernel, across the panels made in it: a page closed while its panel trained leaves the
run going in the kernel, with no panel on screen. When the page is opened again and its cells run, the new panel
finds that run here and follows it (same runs: same labels and configurations) instead of starting a second copy
beside it; a panel made while another run trains says so. Used by :class:`~spanviz.widgets.TrainingPanel`."""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

_PANELS: weakref.WeakSet[Any] = weakref.WeakSet()
"""Every training panel made in this process (dropped when garbage-collected)."""


def register(panel: Any) -> None:
    """Note a panel (anything with ``runner`` (``running``, ``steps_done``, ``steps_planned``) and ``run_keys``)."""
    _PANELS.add(panel)


def training_elsewhere(panel: Any) -> list[Any]:
    """The other panels of this kernel whose runs are training now (not those sharing ``panel``'s runner)."""
    return [p for p in list(_PANELS) if p is not panel and p.runner is not panel.runner and p.runner.running]


def same_runs(panel: Any, keys: Iterable[tuple[str, str]]) -> Any:
    """A panel of this kernel training exactly the runs ``keys`` ((label, settings) pairs) now, or None."""
    wanted = frozenset(keys)
    return next((p for p in training_elsewhere(panel) if p.run_keys == wanted), None)


def describe(panels: Iterable[Any]) -> str:
    """The runs of ``panels`` in words: ``"tiny GPT 120/300 steps"``, joined by "; " ("" for none)."""
    runs = []
    for p in panels:
        r = p.runner
        runs += [f"{label} {r.steps_done.get(label, 0)}/{steps} steps" for label, steps in r.steps_planned.items()]
    return "; ".join(runs)
