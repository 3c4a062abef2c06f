"""The training probe: per layer and step, observed max|S|, σ, the three bounds, each strategy's scale and overflows.

:class:`FP8Probe` plugs into :class:`spanviz.train.Trainer` as a probe (``name``, ``every``, ``probe(trainer)``);
its ``__qualname__`` and ``describe()`` enter the results-store key, so both stay as they are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from spanviz.contexts import eval_mode
from spanviz.fp8.casting import count_overflow, utilisation
from spanviz.fp8.core import FORMATS, check_delta, geometry_scale, logit_bounds
from spanviz.fp8.folding import check_bilinear, layer_sigma
from spanviz.fp8.scaling import STRATEGIES, CalibratedAlpha, DelayedScaling, dynamic_scale, strategy_alpha
from spanviz.fp8.strategies import PRACTICAL, cast_stats, practical_scales, scale_cost
from spanviz.validators import check_choice, check_float, check_int

SUMMED = ("overflow", "underflow_zero", "underflow_subnormal", "scales", "reductions")
WORST = ("error_scores", "error_softmax")
"""Per-strategy columns of the probe's totals: summed over layers, or the largest over layers."""


class FP8Probe:
    """Training probe: per layer and step, observed max|S|, σ, the three bounds, scales and overflow counts.

    Implements the trainer's probe protocol: attributes ``name`` and ``every``, and
    ``probe(trainer) -> dict`` reading ``trainer.model`` (a :class:`spanviz.model.TinyGPT`) and
    ``trainer.probe_batch`` (x, y), x (B, T) token ids. The forward pass runs in eval mode (no dropout)
    without gradients; the model's mode is restored afterwards.

    Per layer ℓ it computes σ^(ℓ) exactly from the folded weights (:func:`fold_qk`, ρ² = d_in),
    K = B · (allowed pairs summed over heads), N = B · n_head · T, the bounds of :func:`logit_bounds`, and
    for each strategy the scale it would have used at this step — chosen *before* looking at this step's
    logits — and the number of allowed logits that overflow a non-saturating cast with that scale
    (:func:`count_overflow` with ``count="cast"``: |S·s| > 464 for E4M3; values in (448, 464] round to 448).

    Strategies: "delayed" (:class:`DelayedScaling`, history in probe calls: with ``every`` > 1 it sees
    only every ``every``-th step), "dynamic" (:func:`dynamic_scale` from this step's own amax: never overflows,
    needs the reduction over the logits first), "theory" (α*(δ)), "agnostic", "deterministic" (α = 1),
    "calibrated" (:class:`CalibratedAlpha`). "dynamic" is not in the default list (the stored runs of notebook 03
    were made without it, and the list is part of their store key): its columns are a function of the recorded
    amax alone, and :func:`with_dynamic` adds them to any FP8Probe history (not its underflow and error columns,
    which need the scores).

    Keys (all prefixed ``fp8/``; ℓ = layer index): ``L{ℓ}/max_abs_logit``, ``L{ℓ}/sigma``, ``L{ℓ}/gamma``,
    ``L{ℓ}/bound_worst_case``, ``L{ℓ}/bound_agnostic``, ``L{ℓ}/bound_rank_aware``,
    ``L{ℓ}/scale/{strategy}``, ``L{ℓ}/overflow/{strategy}``, ``L{ℓ}/utilisation/{strategy}``, and
    ``overflow/{strategy}`` (sum over layers). With E4M3, per strategy (practical ones included) also what the
    saturating cast does and costs (:func:`spanviz.fp8.strategies.cast_stats`,
    :func:`~spanviz.fp8.strategies.scale_cost`):
    ``L{ℓ}/underflow_zero/…``, ``underflow_subnormal``, ``error_scores``, ``error_softmax``, ``scales`` (scale values
    stored), ``reductions`` (amax reductions before the cast), and their totals ``{stat}/{strategy}`` (summed over
    layers; errors: the largest layer's). Values are Python floats / ints.

    Args:
        every: probe period in steps, >= 1. delta: δ in (0, 1). margin: >= 0 (all strategies).
        strategies: subset of ("delayed", "dynamic", "theory", "agnostic", "deterministic", "calibrated").
        fmt: "e4m3" or "e5m2". power_of_two: round geometry-aware scales down to powers of two.
        history_len, algo: for "delayed". kappa, burn_in, decay: for "calibrated".
        practical: names from :data:`spanviz.fp8.strategies.PRACTICAL` ("rowwise", "rowwise_pow2", "mx",
            "tile_1x128"): scales per row / block / tile from the scores themselves (no ``scale`` or
            ``utilisation`` column; in the store key only when given).
    Optional protocol parts: ``describe()`` (settings), ``state_dict()`` / ``load_state_dict()`` (the
    delayed-scaling histories and calibration survive a checkpoint resume).

    Raises:
        ValueError on bad arguments; at call time when the model uses qk_norm or the batch is not (B, T).
    Source: experiment design of arXiv 2602.18851 as adapted by spanviz.
    """

    name = "fp8"

    def __init__(
        self,
        every: int = 1,
        delta: float = 1e-3,
        margin: float = 0,
        strategies: Sequence[str] = ("delayed", "theory", "deterministic", "calibrated"),
        *,
        fmt: str = "e4m3",
        power_of_two: bool = False,
        history_len: int = 1024,
        algo: str = "max",
        kappa: float = 2.0,
        burn_in: int = 20,
        decay: float = 0.99,
        practical: Sequence[str] = (),
    ) -> None:
        self.every = check_int("every", every, 1)
        self.delta = check_delta(delta)
        self.margin = check_float("margin", margin, 0.0)
        strategies = tuple(strategies) if isinstance(strategies, (list, tuple)) else (strategies,)
        bad = [s for s in strategies if not isinstance(s, str) or s not in STRATEGIES]
        if bad or not strategies:
            raise ValueError(f"strategies must be a non-empty subset of {STRATEGIES}, got {strategies!r}")
        self.strategies = strategies
        self.fmt = check_choice("fmt", fmt, FORMATS)
        self.power_of_two = bool(power_of_two)
        practical = tuple(practical) if isinstance(practical, (list, tuple)) else (practical,)
        bad = [s for s in practical if s not in PRACTICAL]
        if bad or len(set(practical)) != len(practical):
            raise ValueError(f"practical must be distinct names from {PRACTICAL}, got {practical!r}")
        if practical and self.fmt != "e4m3":
            raise ValueError(f"practical strategies cast to E4M3 (MX's element format here): fmt must be 'e4m3', "
                             f"got fmt={self.fmt!r}")
        self.practical = practical
        # Validate the stateful strategies' settings now; instances are made per layer on first use.
        DelayedScaling(history_len, self.margin, algo, self.fmt)
        CalibratedAlpha(kappa, burn_in, decay)
        self._delayed_args = (history_len, self.margin, algo, self.fmt)
        self._calibrated_args = (kappa, burn_in, decay)
        self.delayed: list[DelayedScaling] = []
        self.calibrated: list[CalibratedAlpha] = []

    def reset(self) -> None:
        """Forget the delayed-scaling histories and calibration state."""
        self.delayed, self.calibrated = [], []

    def describe(self) -> dict[str, Any]:
        """JSON-able settings (recorded in the run config by :mod:`spanviz.train`)."""
        history_len, _, algo, _ = self._delayed_args
        kappa, burn_in, decay = self._calibrated_args
        return {
            "delta": self.delta, "margin": self.margin, "strategies": list(self.strategies), "fmt": self.fmt,
            "power_of_two": self.power_of_two, "history_len": history_len, "algo": algo, "kappa": kappa,
            "burn_in": burn_in, "decay": decay, "overflow_count": "cast",
            # only when set: the store keys of runs probed without them stay as they were
            **({"practical": list(self.practical)} if self.practical else {}),
        }  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state: per layer the delayed-scaling history and scale, and the calibration state."""
        return {
            "delayed": [ds.state_dict() for ds in self.delayed],
            "calibrated": [c.state_dict() for c in self.calibrated],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (e.g. when a run resumes from a checkpoint)."""
        delayed, calibrated = state.get("delayed", []), state.get("calibrated", [])
        if len(delayed) != len(calibrated):
            raise ValueError(f"state has {len(delayed)} delayed and {len(calibrated)} calibrated layers; must match")
        self._state(len(delayed))
        for ds, st in zip(self.delayed, delayed):
            ds.load_state_dict(st)
        for cal, st in zip(self.calibrated, calibrated):
            cal.load_state_dict(st)

    def _state(self, n_layer: int) -> None:
        if len(self.delayed) != n_layer:
            self.delayed = [DelayedScaling(*self._delayed_args) for _ in range(n_layer)]
            self.calibrated = [CalibratedAlpha(*self._calibrated_args) for _ in range(n_layer)]

    @torch.no_grad()
    def __call__(self, trainer: Any) -> dict[str, float | int]:
        model = trainer.model
        x = trainer.probe_batch[0]
        if not isinstance(x, Tensor) or x.dim() != 2:
            got = getattr(x, "shape", x)
            raise ValueError(f"trainer.probe_batch[0] must be a (B, T) tensor of token ids, got {got}")
        for block in model.blocks:
            check_bilinear(block.attn)
        with eval_mode(model):
            _, cache = model.run_with_cache(x, names=lambda n: n.endswith("hook_attn_scores"))
        self._state(len(model.blocks))
        B, T = x.shape
        names = (*self.strategies, *self.practical)
        out: dict[str, float | int] = {}
        for i, block in enumerate(model.blocks):
            row = self._layer(i, block, cache[f"blocks.{i}.attn.hook_attn_scores"], B, T)
            for key, value in row.items():
                out[f"L{i}/{key}"] = value
            for s in names:  # totals over layers: counts and costs summed, errors the worst layer's
                for stat in (*SUMMED, *WORST):
                    key, value = f"{stat}/{s}", row.get(f"{stat}/{s}")
                    if value is None:  # E5M2: no cast statistics
                        continue
                    out[key] = max(out.get(key, value), value) if stat in WORST else out.get(key, 0) + value
        return {f"fp8/{k}": v for k, v in out.items()}

    def _layer(self, i: int, block: nn.Module, scores: Tensor, B: int, T: int) -> dict[str, float | int]:
        sigma, folded = layer_sigma(block)
        allowed = block.attn.allowed(T, scores.device)  # (H, T, T)
        logits = scores[:, allowed].float()  # (B, n_allowed)
        mask = allowed.unsqueeze(0)  # (1, H, T, T)
        amax = float(logits.abs().max())
        n_pairs, n_keys = logits.numel(), B * folded.n_head * T
        bounds = logit_bounds(
            sigma, folded.d_in, folded.d_head, r=folded.rank, n_pairs=n_pairs, n_keys=n_keys,
            delta=self.delta, rho2=folded.rho2,
        )  # fmt: skip
        row: dict[str, float | int] = {
            "max_abs_logit": amax,
            "sigma": sigma,
            "gamma": bounds["gamma"],
            "bound_worst_case": bounds["worst_case"],
            "bound_agnostic": bounds["agnostic"],
            "bound_rank_aware": bounds["rank_aware"],
        }
        for s in self.strategies:
            if s == "delayed":
                # s = fmax / amax_ref / 2^margin from the amaxes of earlier probe calls
                scale = self.delayed[i].step(amax)
            elif s == "dynamic":
                # s = fmax / amax / 2^margin from this step's own amax
                scale = dynamic_scale(amax, margin=self.margin, fmt=self.fmt)
            else:
                # α: calibrated (chosen before this step) or α*(δ), α_agn(δ), 1
                if s == "calibrated":
                    alpha = self.calibrated[i].alpha
                else:
                    alpha = strategy_alpha(s, folded.d_in, folded.rank, n_pairs, n_keys, self.delta)
                # s = fmax / (2^margin · α · ρ² σ / √d_head), from the weights alone
                scale = geometry_scale(
                    sigma, folded.d_head, folded.rho2, alpha, margin=self.margin, fmt=self.fmt,
                    power_of_two=self.power_of_two,
                )  # fmt: skip
                if s == "calibrated" and bounds["worst_case"] > 0:
                    # α_obs = max|S| / B_wc of this step, for the next step's α
                    self.calibrated[i].update(amax / bounds["worst_case"])
            row[f"scale/{s}"] = scale
            # overflows: allowed logits with |S·s| > 464 (E4M3, before any cast); used range amax·s / 448
            row[f"overflow/{s}"] = count_overflow(logits, scale, self.fmt)
            row[f"utilisation/{s}"] = utilisation(amax, scale, self.fmt)
            if self.fmt == "e4m3":
                row.update(self._cast(s, scores, scale, mask)[0])
        for s in self.practical:  # a scale per row / block / tile, from the scores themselves
            stats, row[f"overflow/{s}"] = self._cast(s, scores, practical_scales(s, scores, mask), mask)
            row.update(stats)
        return row

    @staticmethod
    def _cast(s: str, scores: Tensor, scale: Any, mask: Tensor) -> tuple[dict[str, float | int], int]:
        # underflows (to zero, to subnormals) and errors of the E4M3 cast; scales stored and reductions before it
        stats = cast_stats(scores, scale, mask)
        row: dict[str, float | int] = {f"{k}/{s}": v for k, v in stats.items() if k != "overflow"}
        row.update({f"{k}/{s}": v for k, v in scale_cost(s, tuple(scores.shape)).items()})
        return row, int(stats["overflow"])


def with_dynamic(history: Mapping[str, Sequence[Any]], margin: float = 0.0, fmt: str = "e4m3") -> dict[str, list[Any]]:
    """An :class:`FP8Probe` history with the "dynamic" strategy's columns added where it has none.

    Dynamic scaling's scale is a function of the step's own amax (:func:`dynamic_scale`), which the probe records
    per layer (``fp8/L{ℓ}/max_abs_logit``), so its columns follow from any probe history: per layer
    ``scale/dynamic`` = fmax / amax / 2^margin, ``utilisation/dynamic`` = amax·s/fmax (= 1/2^margin) and
    ``overflow/dynamic`` = 0 — the same numbers the probe computes with "dynamic" among its strategies. Rows whose
    amax is None or not finite get None (the count of the inf entries is not in the history).

    Args:
        history: ``{key: [value per row]}`` with ``step`` and the ``fp8/L{ℓ}/max_abs_logit`` columns (not changed).
        margin, fmt: those of the probe that recorded it (the scale is divided by 2^margin).
    Returns: a new dict; the history itself when it already has ``fp8/overflow/dynamic``.
    Raises: ValueError when the history has no ``fp8/L{ℓ}/max_abs_logit`` column, or for a bad margin or fmt.
    Source: spanviz (the dynamic strategy as torchao and Transformer Engine's current scaling define it).
    """
    if "fp8/overflow/dynamic" in history:
        return dict(history)
    check_choice("fmt", fmt, FORMATS)
    margin = check_float("margin", margin, 0.0)
    layers = sorted(int(k.split("/")[1][1:]) for k in history if k.startswith("fp8/L") and k.endswith("/max_abs_logit"))
    if not layers:
        raise ValueError(f"history has no fp8/L<layer>/max_abs_logit column (FP8Probe); keys: {sorted(history)[:10]}")
    out = {k: list(v) for k, v in history.items()}
    total: list[int | None] = [0] * len(out[f"fp8/L{layers[0]}/max_abs_logit"])
    for ell in layers:
        amaxes = out[f"fp8/L{ell}/max_abs_logit"]
        known = [amax is not None and math.isfinite(amax) for amax in amaxes]
        # s = fmax / amax / 2^margin: this step's own amax, so no logit lands above fmax
        scales = [dynamic_scale(a, margin=margin, fmt=fmt) if ok else None for a, ok in zip(amaxes, known)]
        out[f"fp8/L{ell}/scale/dynamic"] = scales
        out[f"fp8/L{ell}/utilisation/dynamic"] = [utilisation(a, s, fmt) if ok else None
                                                  for a, s, ok in zip(amaxes, scales, known)]
        out[f"fp8/L{ell}/overflow/dynamic"] = [0 if ok else None for ok in known]
        total = [t if ok else None for t, ok in zip(total, known)]  # a row not measured in a layer: None in the sum
    out["fp8/overflow/dynamic"] = total
    return out
