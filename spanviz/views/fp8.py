"""The FP8 panel's analytic views: bounds versus the rank r, and the E4M3 scale each bound gives (no widgets).

For the random weights of one head (``fp8.random_bounds_vs_rank``) the worst-case, rank-agnostic and rank-aware
bounds on max |S| and the observed max |S| per rank r of W^Q W^Kᵀ. The random draw does not depend on δ, so it is
made once; a new δ re-evaluates only ``fp8.logit_bounds`` per rank (what keeps the δ slider instant). A bound B
with margin m gives the E4M3 scale s = 448 / (2^m · B) (``fp8.geometry_scale``), which holds |S| up to 2^m · B.

Source: arXiv 2602.18851 (rank-aware bounds; the bounds are spanviz's reconstruction).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spanviz import fp8
from spanviz.threads import torch_threads

BOUND_NAMES = {"worst case": "worst_case", "rank-agnostic": "agnostic", "rank-aware": "rank_aware"}
"""The bounds' labels and their keys in a row of ``fp8.random_bounds_vs_rank`` / ``fp8.logit_bounds``."""


class BoundsVsRank:
    """Bounds vs rank r = 1..d_head for one head of (d_model, d_head) over ``n_tokens`` tokens, at any δ.

    Args:
        d_model, d_head: the head's sizes. n_tokens: N tokens (K = N² pairs).
        threads: torch intra-op threads for the random draw (None: leave torch's setting).
    """

    def __init__(self, d_model: int, d_head: int, n_tokens: int, threads: int | None = None) -> None:
        self.d_model, self.d_head, self.n_tokens, self.threads = d_model, d_head, n_tokens, threads
        self._rows: list[dict[str, float]] = []
        self._delta: float | None = None

    def rows(self, delta: float) -> list[dict[str, float]]:
        """``fp8.random_bounds_vs_rank`` rows (``r``, ``sigma``, ``gamma``, the bounds, ``observed_max``) at δ.

        Raises: ValueError for δ outside (0, 1).
        """
        n = self.n_tokens
        if not self._rows:
            with torch_threads(self.threads):
                self._rows = fp8.random_bounds_vs_rank(self.d_model, self.d_head, range(1, self.d_head + 1),
                                                       delta=delta, n_tokens=n)
            self._delta = delta
        if delta != self._delta:
            for row in self._rows:
                b = fp8.logit_bounds(row["sigma"], self.d_model, self.d_head, r=int(row["r"]), n_pairs=n * n,
                                     n_keys=n, delta=delta)
                row.update(gamma=b["gamma"], worst_case=b["worst_case"], agnostic=b["agnostic"],
                           rank_aware=b["rank_aware"])
            self._delta = delta
        return self._rows

    def curves(self, delta: float, margin: int, r: int) -> dict[str, Any]:
        """Arguments of ``plots.bound_vs_rank_*``: each bound times 2^margin — the largest |S| the E4M3 scale
        picked from that bound holds (s = 448 / (2^margin · B)); at margin 0, the bounds themselves."""
        rows = self.rows(delta)
        headroom, suffix = 2.0**margin, f" × 2^{margin}" if margin else ""

        def col(key: str) -> np.ndarray:
            return np.array([row[key] for row in rows])  # (d_head,)

        return {
            "ranks": col("r"),
            "bounds": {f"{name}{suffix}": headroom * col(key) for name, key in BOUND_NAMES.items()},
            "observed": col("observed_max"),
            "r": r,
        }

    def row(self, delta: float, r: int) -> dict[str, float]:
        """The row of rank r at δ."""
        return next(x for x in self.rows(delta) if x["r"] == r)

    def scales(self, delta: float, margin: int, r: int) -> list[dict[str, Any]]:
        """Per strategy at rank r: ``strategy``, ``bound``, the E4M3 ``scale`` picked from it and the fraction of
        the E4M3 range the observed max |S| then ``used`` (see :func:`scale_table`)."""
        return scale_table(self.row(delta, r), self.d_model, self.d_head, self.n_tokens, delta, margin)


def scale_table(row: dict[str, float], d_model: int, d_head: int, n_tokens: int, delta: float,
                margin: float) -> list[dict[str, Any]]:
    """The E4M3 scale from each bound of one ``fp8.random_bounds_vs_rank`` row, and the range it uses.

    α = 1 (deterministic), min(α_agnostic, 1) and min(α*, 1) (``fp8.logit_bounds`` at δ), each turned into a scale
    by ``fp8.geometry_scale`` (s = 448 / (2^margin · α ρ² σ / √d_head), ρ² = d_model; 1.0 when the bound is 0) and
    a range used by ``fp8.utilisation`` (observed max |S| · s / 448).

    Returns:
        one dict per strategy: ``strategy`` ("deterministic", "rank-agnostic", "rank-aware"), ``bound``,
        ``scale``, ``used``.
    """
    n = n_tokens
    b = fp8.logit_bounds(row["sigma"], d_model, d_head, r=int(row["r"]), n_pairs=n * n, n_keys=n, delta=delta)
    alphas = {"deterministic": ("worst_case", 1.0), "rank-agnostic": ("agnostic", min(b["alpha_agnostic"], 1.0)),
              "rank-aware": ("rank_aware", min(b["alpha_star"], 1.0))}
    table = []
    for strategy, (key, alpha) in alphas.items():
        scale = fp8.geometry_scale(row["sigma"], d_head, b["rho2"], alpha, margin=margin)
        table.append({"strategy": strategy, "bound": row[key], "scale": scale,
                      "used": fp8.utilisation(row["observed_max"], scale)})
    return table
