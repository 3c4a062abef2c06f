"""Scaling strategies: which α multiplies the worst-case bound, and the delayed-scaling baseline.

A strategy picks the scale for a step *before* that step's logits are seen:

* "deterministic": α = 1, s from the worst case B_wc (never overflows);
* "theory": α = α*(δ), the rank-aware bound; "agnostic": α = α_agn(δ), the rank-agnostic one
  (both probabilistic, assuming isotropic, independent queries and keys);
* "calibrated" (:class:`CalibratedAlpha`): α measured from observed logits with a safety factor;
* "delayed" (:class:`DelayedScaling`): Transformer Engine's recipe from the amax history — the baseline the
  geometry-aware strategies are compared with (it only knows past steps);
* "dynamic" (:func:`dynamic_scale`): current (just-in-time) scaling per tensor, what torchao's float8 training
  and Transformer Engine's current-scaling recipe do today — the scale comes from the amax of the very tensor
  about to be cast. It cannot overflow (except on non-finite input), and it costs a reduction over every score
  (max |S|) that must finish *before* the cast can start: one more pass over B·H·T² values, and across devices
  an all-reduce. The geometry-aware scales need only the weights, known before the forward pass.

The geometry-aware scale itself is :func:`spanviz.fp8.core.geometry_scale`; the α it takes comes from here.
"""

from __future__ import annotations

import math
from collections import deque

import torch

from spanviz.fp8.core import FORMATS, FP8_MAX, alpha_agnostic, alpha_star
from spanviz.validators import check_choice, check_float, check_int

ALPHA_CHOICES = ("theory", "agnostic", "deterministic", "calibrated")
STRATEGIES = ("delayed", "dynamic") + ALPHA_CHOICES
DELAYED_ALGOS = ("max", "most_recent")
AMAX_EPS = 1e-12
"""The smallest amax :func:`dynamic_scale` divides by (torchao's float8 ``EPS``): an all-zero tensor gets a large,
finite scale instead of a division by zero."""


def dynamic_scale(amax: float | torch.Tensor, *, margin: float = 0.0, fmt: str = "e4m3") -> float:
    """Dynamic (current, per-tensor) scaling: s = fmax / (2^margin · amax), amax = max |x| of the tensor to cast.

    The amax is the one of the tensor this scale is for, so no entry can land above fmax: max |x|·s = fmax / 2^margin
    (up to one rounding of the product, which a cast rounds back to fmax). What that costs: the amax is a
    reduction over the whole tensor (here every attention logit) that has to finish before the cast starts.

    Args:
        amax: max |x| >= 0 of the tensor about to be cast (float or one-element tensor). Below
            :data:`AMAX_EPS` it counts as AMAX_EPS (an all-zero tensor). A non-finite amax (the tensor holds an
            inf or NaN) has no scale that helps: 1.0 is returned (Transformer Engine's scale before any amax),
            and the non-finite entries overflow whatever the scale.
        margin: >= 0, the scale is divided by 2^margin (as for the other strategies).
        fmt: "e4m3" (fmax 448) or "e5m2" (fmax 57344).
    Returns: s (float); for a finite amax >= AMAX_EPS exactly fmax / amax / 2^margin.
    Raises: ValueError for a negative amax, a bad margin or an unknown format.
    Source: torchao float8 training (``tensorwise`` dynamic scaling: ``amax_to_scale`` with EPS 1e-12) and
    Transformer Engine's current-scaling recipe; the margin is spanviz's, to compare like with like.
    """
    fmax = FP8_MAX[check_choice("fmt", fmt, FORMATS)]
    margin = check_float("margin", margin, 0.0)
    amax = float(amax)
    if math.isnan(amax) or math.isinf(amax):
        if amax < 0:
            raise ValueError(f"amax must be >= 0, got {amax}")
        return 1.0
    if amax < 0:
        raise ValueError(f"amax must be >= 0, got {amax}")
    # s = fmax / amax / 2^margin, the amax of this very tensor
    return fmax / max(amax, AMAX_EPS) / 2.0**margin


def strategy_alpha(strategy: str, d: int, r: int, n_pairs: int, n_keys: int, delta: float) -> float:
    """α for a stateless strategy, capped at 1: "theory" → α*(δ), "agnostic" → α_agn(δ), "deterministic" → 1.

    ("calibrated" needs state: use :class:`CalibratedAlpha`.) Arguments as in :func:`alpha_star`.
    Only "deterministic" is guaranteed safe. "theory" and "agnostic" assume isotropic, independent queries
    and keys; trained activations are not (in spanviz's tiny-GPT runs max|S| reached 0.66–0.89·B_wc,
    above α*, and "theory" overflowed — see docs/fp8_bounds.md).
    Raises: ValueError for an unknown strategy or bad arguments.
    """
    if strategy == "theory":
        return min(1.0, alpha_star(d, r, n_pairs, n_keys, delta))
    if strategy == "agnostic":
        return min(1.0, alpha_agnostic(d, n_pairs, delta))
    if strategy == "deterministic":
        return 1.0
    raise ValueError(f"strategy must be one of ('theory', 'agnostic', 'deterministic') here, got {strategy!r}")


class CalibratedAlpha:
    """Calibrated α: measured from observed logits, kept with a safety factor κ, raised at once, decayed slowly.

    Protocol per step: use :attr:`alpha` for the scale *before* the forward pass, then call
    ``update(alpha_obs)`` with α_obs = observed max|S| / B_wc of that step.

    * burn-in (the first ``burn_in`` updates): α = 1 (deterministic, safe) while recording max α_obs;
      at its end α = min(1, κ · max α_obs);
    * afterwards: α ← min(1, max(κ · α_obs, decay · α)) — jumps up immediately when κ·α_obs exceeds it,
      otherwise shrinks by ``decay`` per update, never below κ·α_obs.

    Because α multiplies the weight-derived B_wc, a sudden weight change still moves the scale at once.

    Args:
        kappa: κ >= 1 (1.5–2 suggested). burn_in: updates before calibrating, >= 0.
        decay: per-update factor in (0, 1].
    Raises: ValueError on bad arguments, or when update gets α_obs < 0 / non-finite.
    Source: arXiv 2602.18851 (idea); the burn-in/raise/decay rule is a **spanviz reconstruction**.
    """

    def __init__(self, kappa: float = 2.0, burn_in: int = 20, decay: float = 0.99) -> None:
        self.kappa = check_float("kappa", kappa, 1.0)
        self.burn_in = check_int("burn_in", burn_in, 0)
        self.decay = check_float("decay", decay, 0.0, 1.0, low_open=True)
        self.n_updates = 0
        self.max_obs = 0.0
        self._alpha = 1.0

    @property
    def alpha(self) -> float:
        """α to use for the next step, in (0, 1]."""
        return self._alpha

    @property
    def calibrated(self) -> bool:
        return self.n_updates >= self.burn_in

    def update(self, alpha_obs: float) -> float:
        """Record α_obs of the step just done; returns the α for the next step."""
        alpha_obs = check_float("alpha_obs", float(alpha_obs), 0.0)
        self.n_updates += 1
        self.max_obs = max(self.max_obs, alpha_obs)
        if self.n_updates < self.burn_in:
            return self._alpha
        if self.n_updates == self.burn_in:
            # α = κ · max α_obs over the burn-in
            self._alpha = self.kappa * self.max_obs
        else:
            # α ← max(κ · α_obs, decay · α): up at once, down slowly
            self._alpha = max(self.kappa * alpha_obs, self.decay * self._alpha)
        self._alpha = min(1.0, max(self._alpha, torch.finfo(torch.float32).tiny))
        return self._alpha

    def state_dict(self) -> dict[str, int | float]:
        """JSON-able state: ``n_updates``, ``max_obs`` and ``alpha`` (what a checkpoint resume restores)."""
        return {"n_updates": self.n_updates, "max_obs": self.max_obs, "alpha": self._alpha}

    def load_state_dict(self, state: dict[str, int | float]) -> None:
        """Restore :meth:`state_dict` output."""
        self.n_updates, self.max_obs = int(state["n_updates"]), float(state["max_obs"])
        self._alpha = float(state["alpha"])


class DelayedScaling:
    """Simulator of Transformer Engine delayed scaling for one tensor (here: one layer's logits).

    Semantics (TE ``DelayedScaling`` recipe): the scale used at step t comes from the amax history of
    steps < t; after the step its amax is recorded and the scale recomputed:
    scale = fmax / amax_ref / 2^margin, amax_ref = max of the last ``history_len`` amaxes ("max") or the
    latest one ("most_recent"). Before any history the scale is 1 (TE default). As in TE, the previous
    scale is kept when amax_ref is 0 or not finite. As TE's reduction (``fmaxf``, starting from 0), "max"
    skips NaN entries: a NaN amax is recorded but does not freeze the scale while it stays in the history
    (a history of NaN only gives amax_ref 0: the scale is kept). Any step whose amax exceeds
    amax_ref·2^margin overflows.

    Args:
        history_len: >= 1 (TE default 1024). margin: >= 0. algo: "max" or "most_recent".
        fmt: "e4m3" or "e5m2".
    Use: ``s = ds.scale`` (for this step) then ``ds.update(amax)``; or ``s = ds.step(amax)`` for both.
    Raises: ValueError on bad arguments or a negative amax.
    Source: NVIDIA Transformer Engine documentation (``DelayedScaling`` recipe, ``amax_compute_algo``).
    """

    def __init__(self, history_len: int = 1024, margin: float = 0, algo: str = "max", fmt: str = "e4m3") -> None:
        self.history_len = check_int("history_len", history_len, 1, 2**31 - 1)
        self.margin = check_float("margin", margin, 0.0)
        self.algo = check_choice("algo", algo, DELAYED_ALGOS)
        self.fmt = check_choice("fmt", fmt, FORMATS)
        self.history: deque[float] = deque(maxlen=self.history_len)
        self.scale = 1.0

    @property
    def amax_ref(self) -> float | None:
        """The reference amax the current scale came from (None while the history is empty)."""
        if not self.history:
            return None
        if self.algo == "most_recent":
            return self.history[-1]
        return max((a for a in self.history if not math.isnan(a)), default=0.0)  # TE: fmaxf from 0 skips NaN

    def update(self, amax: float) -> float:
        """Record this step's amax and recompute the scale for the next step; returns the new scale."""
        amax = float(amax)
        if amax < 0:
            raise ValueError(f"amax must be >= 0, got {amax}")
        self.history.append(amax)
        ref = self.amax_ref
        if ref is not None and math.isfinite(ref) and ref > 0:
            # s = fmax / amax_ref / 2^margin
            self.scale = FP8_MAX[self.fmt] / ref / 2.0**self.margin
        return self.scale

    def step(self, amax: float) -> float:
        """Return the scale used for the step whose amax is given (computed before it), then record it."""
        scale = self.scale
        self.update(amax)
        return scale

    def state_dict(self) -> dict[str, list[float] | float]:
        """JSON-able state: the amax ``history`` (oldest first) and the current ``scale``."""
        return {"history": list(self.history), "scale": self.scale}

    def load_state_dict(self, state: dict[str, list[float] | float]) -> None:
        """Restore :meth:`state_dict` output (the history keeps at most ``history_len`` amaxes)."""
        self.history.clear()
        self.history.extend(float(a) for a in state["history"])
        self.scale = float(state["scale"])
