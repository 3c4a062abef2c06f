"""Teaching demos: the rank knob on random weights, and the scale each bound would give (notebook 03's panel).

:func:`random_bounds_vs_rank` draws once (milliseconds on a CPU); :func:`bounds_at_delta` and
:func:`bound_scales` only re-evaluate formulas, so the δ and margin sliders can call them on every move.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import torch

from spanviz.contexts import torch_threads
from spanviz.fp8.casting import utilisation
from spanviz.fp8.core import check_delta, logit_bounds, scale_from_bound
from spanviz.validators import check_int

BOUND_KEYS = ("worst_case", "agnostic", "rank_aware")
"""The bounds of a :func:`random_bounds_vs_rank` row (and of :func:`spanviz.fp8.logit_bounds`), loosest first."""


def random_bounds_vs_rank(
    d_model: int,
    d_head: int,
    ranks: Iterable[int],
    *,
    delta: float = 1e-3,
    n_tokens: int = 64,
    seed: int = 0,
) -> list[dict[str, float]]:
    """Bounds versus the rank r of M = W^Q W^Kᵀ for random weights and isotropic inputs (the rank slider).

    One head: W^Q, W^K ~ N(0, 1/d_model) (d_model×d_head); W^Q is truncated to its top-r singular
    directions (rank r, same σ(W^Q)). x: n_tokens vectors uniform on the √d_model sphere (LayerNorm
    output without gain), used as both queries and keys; K = n_tokens², N = n_tokens. Same seed ⇒ same
    weights and inputs for every r, so moving the slider changes only the rank.

    Args:
        d_model: >= 1. d_head: in [1, d_model]. ranks: each in [1, d_head].
        delta: δ in (0, 1). n_tokens: >= 1. seed: >= 0.
    Returns:
        one dict per rank: ``r``, ``sigma``, ``gamma``, ``worst_case``, ``agnostic``, ``rank_aware``
        (logit units), ``observed_max`` (max |S| over all n_tokens² pairs), ``sqrt_r_over_d`` = √(r/d).
    Raises:
        ValueError on bad arguments (r > d_head or < 1, δ ∉ (0, 1), ...).
    Source: **spanviz reconstruction** (bounds) of arXiv 2602.18851's rank experiment.
    """
    check_int("d_model", d_model, 1)
    check_int("d_head", d_head, 1, d_model)
    check_int("n_tokens", n_tokens, 1)
    check_int("seed", seed, 0)
    delta = check_delta(delta)
    ranks = list(ranks)
    for r in ranks:
        check_int("r (in ranks)", r, 1, d_head)
    gen = torch.Generator().manual_seed(seed)
    W_Q = torch.randn(d_model, d_head, generator=gen) / math.sqrt(d_model)  # (d_model, d_head)
    W_K = torch.randn(d_model, d_head, generator=gen) / math.sqrt(d_model)
    X = torch.randn(n_tokens, d_model, generator=gen)  # (n, d_model)
    # x ← √d · x / ‖x‖: on the √d sphere
    X = X * (math.sqrt(d_model) / X.norm(dim=-1, keepdim=True))
    U, S, Vh = torch.linalg.svd(W_Q, full_matrices=False)  # W^Q_r = U[:, :r] diag(S[:r]) Vh[:r]
    R_K = torch.linalg.qr(W_K, mode="r")[1]  # W_K = Q_K R_K
    core = (S.unsqueeze(1) * Vh) @ R_K.T  # (d_head, d_head); σ(W^Q_r W_Kᵀ) = σ(core[:r]) (QR-core method)
    K_proj = X @ W_K  # (n, d_head)
    XU = X @ U  # (n, d_head): queries in W^Q's left singular basis
    rows = []
    for r in ranks:
        # σ_r = ‖W^Q_r W^Kᵀ‖₂ = ‖core[:r]‖₂ (the top-r rows of the QR core)
        sigma = float(torch.linalg.matrix_norm(core[:r], ord=2))
        # q = X W^Q_r with W^Q_r = U_r diag(S_r) V_rᵀ
        q = (XU[:, :r] * S[:r]) @ Vh[:r]  # (n, d_head)
        # max |S| = max |q kᵀ| / √d_head over all n² pairs
        observed = float((q @ K_proj.T).abs().max()) / math.sqrt(d_head)
        # γ(r) and B_wc, B_agnostic, B_rank-aware at this σ_r (K = n², N = n)
        rows.append({"r": r, "sigma": sigma, **_rank_bounds(sigma, r, d_model, d_head, n_tokens, delta),
                     "observed_max": observed, "sqrt_r_over_d": math.sqrt(r / d_model)})
    return rows


def _rank_bounds(sigma: float, r: int, d_model: int, d_head: int, n_tokens: int, delta: float) -> dict[str, float]:
    """The δ-dependent part of a row: γ and the three bounds for n_tokens tokens (K = n², N = n)."""
    b = logit_bounds(sigma, d_model, d_head, r=r, n_pairs=n_tokens**2, n_keys=n_tokens, delta=delta)
    return {key: b[key] for key in ("gamma", *BOUND_KEYS)}


def bounds_at_delta(
    rows: Iterable[Mapping[str, float]], d_model: int, d_head: int, *, delta: float, n_tokens: int = 64
) -> list[dict[str, float]]:
    """Rows of :func:`random_bounds_vs_rank` with γ and the three bounds re-evaluated at another δ.

    σ and the observed max |S| do not depend on δ, so a δ slider needs no new weights, inputs or norms: only
    :func:`spanviz.fp8.logit_bounds` per rank (what keeps it instant). Equals ``random_bounds_vs_rank(...,
    delta=delta)`` for the same d_model, d_head, n_tokens and seed.

    Args:
        rows: from :func:`random_bounds_vs_rank` (keys ``r``, ``sigma``, ...; not modified).
        d_model, d_head, n_tokens: as given to :func:`random_bounds_vs_rank`. delta: δ in (0, 1).
    Returns: new rows, keys and order as :func:`random_bounds_vs_rank` gives them.
    Raises: ValueError on bad arguments (as :func:`spanviz.fp8.logit_bounds`).
    Source: **spanviz reconstruction** (bounds) of arXiv 2602.18851's rank experiment.
    """
    return [{**row, **_rank_bounds(row["sigma"], int(row["r"]), d_model, d_head, n_tokens, delta)} for row in rows]


def bound_scales(row: Mapping[str, float], margin: float = 0.0, fmt: str = "e4m3") -> dict[str, dict[str, float]]:
    """For each bound of one rank's row: the bound, the FP8 scale picked from it, and the range it would use.

    Per key of :data:`BOUND_KEYS` ("worst_case" = the deterministic strategy, "agnostic", "rank_aware"):
    ``bound`` B (logit units), ``scale`` s = fmax / (2^margin · B) (:func:`spanviz.fp8.core.scale_from_bound`;
    1.0 when B = 0), ``utilisation`` = observed max |S| · s / fmax (:func:`spanviz.fp8.casting.utilisation`; > 1
    means the observed logits would overflow). What notebook 03's scale table shows for the picked rank.

    Args:
        row: one row of :func:`random_bounds_vs_rank` (keys ``worst_case``, ``agnostic``, ``rank_aware``,
            ``observed_max``), e.g. after its bounds were re-evaluated at another δ.
        margin: >= 0 (the scale is divided by 2^margin). fmt: "e4m3" or "e5m2".
    Returns: ``{bound key: {"bound", "scale", "utilisation"}}`` (floats).
    Raises: ValueError for a bad margin or fmt, or a negative / non-finite bound.
    Source: arXiv 2602.18851 (scale rule); spanviz's teaching view.
    """
    out = {}
    for key in BOUND_KEYS:
        scale = scale_from_bound(row[key], margin=margin, fmt=fmt)
        out[key] = {"bound": row[key], "scale": scale, "utilisation": utilisation(row["observed_max"], scale, fmt)}
    return out


STRATEGY_LABELS = {"worst_case": "deterministic", "agnostic": "rank-agnostic", "rank_aware": "rank-aware"}
"""The strategy each bound of :data:`BOUND_KEYS` stands for, as notebook 03 names it."""


class BoundsVsRank:
    """Notebook 03's bound-vs-rank view: :func:`random_bounds_vs_rank` for r = 1..d_head, drawn once, at any δ.

    The random draw does not depend on δ, so a new δ only re-evaluates the bounds (:func:`bounds_at_delta`) —
    what keeps the δ slider instant.

    Args:
        d_model, d_head: the head's sizes. n_tokens: N tokens (N² pairs).
        threads: torch intra-op threads for the random draw (None: leave torch's setting).
    """

    def __init__(self, d_model: int, d_head: int, n_tokens: int, threads: int | None = None) -> None:
        self.d_model, self.d_head, self.n_tokens, self.threads = d_model, d_head, n_tokens, threads
        self._drawn: tuple[float, list[dict[str, float]]] | None = None  # (δ, rows): the random draw
        self._last: tuple[float, list[dict[str, float]]] | None = None  # (δ, rows) re-evaluated last

    def rows(self, delta: float) -> list[dict[str, float]]:
        """:func:`random_bounds_vs_rank` rows for r = 1..d_head at δ. Raises: ValueError for δ outside (0, 1)."""
        if self._drawn is None:
            with torch_threads(self.threads):
                self._drawn = delta, random_bounds_vs_rank(self.d_model, self.d_head, range(1, self.d_head + 1),
                                                           delta=delta, n_tokens=self.n_tokens)
        for at, rows in (self._drawn, self._last or self._drawn):
            if at == delta:
                return rows
        rows = bounds_at_delta(self._drawn[1], self.d_model, self.d_head, delta=delta, n_tokens=self.n_tokens)
        self._last = delta, rows
        return rows

    def row(self, delta: float, r: int) -> dict[str, float]:
        """The row of rank r at δ."""
        return next(x for x in self.rows(delta) if x["r"] == r)

    def curves(self, delta: float, margin: int, r: int) -> dict:
        """Arguments of ``spanviz.plots.fp8.bound_vs_rank_data``: each bound times 2^margin — the largest |S| the E4M3
        scale picked from that bound holds (s = 448 / (2^margin · B)); at margin 0, the bounds themselves. Also
        ``reference`` = √(r/d_head) × the rank-aware one at r = d_head (what the bound would be if it shrank like
        √r; it does not, because γ grows as r shrinks) and ``gamma`` = γ(r) at δ."""
        rows = self.rows(delta)
        headroom, suffix = 2.0**margin, f" × 2^{margin}" if margin else ""

        def col(key: str) -> np.ndarray:
            return np.array([row[key] for row in rows])  # (d_head,)

        names = {"worst_case": "worst case", "agnostic": "rank-agnostic", "rank_aware": "rank-aware"}
        ranks, aware = col("r"), headroom * col("rank_aware")
        # √(r/d_head) · B_rank-aware(d_head)
        reference = np.sqrt(ranks / self.d_head) * aware[ranks == self.d_head][0]
        return {"ranks": ranks, "observed": col("observed_max"), "r": r, "reference": reference,
                "gamma": col("gamma"), "bounds": {f"{names[key]}{suffix}": headroom * col(key) for key in BOUND_KEYS}}

    def scales(self, delta: float, margin: int, r: int) -> list[dict]:
        """Per strategy at rank r (:func:`bound_scales`): ``strategy`` (:data:`STRATEGY_LABELS`), ``bound``, the
        E4M3 ``scale`` picked from it and the fraction of the E4M3 range the observed max |S| then ``used``."""
        table = bound_scales(self.row(delta, r), margin=margin)
        return [{"strategy": STRATEGY_LABELS[key], "bound": e["bound"], "scale": e["scale"], "used": e["utilisation"]}
                for key, e in table.items()]
