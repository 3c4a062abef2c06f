"""The caption under notebook 03's training figure: the trade between FP8 scaling strategies, in words made from the
figure's data (:func:`spanviz.plots.fp8_training.fp8_series`) — overflows, underflows, error and cost per strategy,
where the weight-derived bound still matters and where it does not. No number is typed: each is counted here from
the series the figure draws (``tests/test_captions.py`` checks them against the drawn traces)."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

import numpy as np

from spanviz.fp8.strategies import E4M3_CAST_OVERFLOW, E4M3_MAX, MX_EMAX_ELEM
from spanviz.plots.fp8 import coinciding
from spanviz.plots.fp8_training import FAMILIES

WEIGHTS = FAMILIES["scale from the weights: no reduction before the cast"]
SCORES = FAMILIES["scale from the scores: a reduction per tensor / row / block before the cast"]


def _n(x: float) -> str:
    return f"{int(round(float(x))):,}"


def _list(names: list[str]) -> str:
    return ", ".join(names) if names else "none"


def _bounds_text(series: Mapping[str, Any], gamma: float | None, r: int | None, n_keys: int | None) -> str:
    steps, observed = np.asarray(series["steps"], float), np.asarray(series["observed"], float)
    bounds = {k: np.asarray(v, float) for k, v in series["bounds"].items()}
    parts = []
    for name, y in bounds.items():
        ratio = observed / y
        over = observed > y
        parts.append(f"the {name} bound at <b>{int(over.sum())}</b> of {len(steps)} steps"
                     + (f" (first at step {int(steps[np.argmax(over)])})" if over.any() else "")
                     + f", at most {np.nanmax(ratio):.2f}× it")
    text = "Max |S| was above " + "; ".join(parts) + "."
    for a, b in coinciding(bounds).items():
        why = ""
        if gamma is not None and r is not None and {a, b} == {"rank-agnostic", "rank-aware"}:
            keys = f"N = {n_keys:,} keys per layer (batch × heads × T)" if n_keys else "this run's keys"
            why = (f": γ = {gamma:.3g} is solved for {keys} — more keys than the bounds view above covers, so a larger "
                   f"γ than there — and γ·r = {gamma:.3g} × {r} = {gamma * r:.3g} is at least the input dimension d, "
                   "which caps both bounds at the same value")
        text += f" The {a} and {b} bounds coincide at every step{why}: one line in the bottom row."
    return text


def fp8_training_caption(series: Mapping[str, Any], *, gamma: float | None = None, r: int | None = None,
                         n_keys: int | None = None, spike: tuple[int, int, float] | None = None) -> str:
    """The trade between the strategies of the FP8 training figure, from its data.

    Args: series: :func:`spanviz.plots.fp8_training.fp8_series`. gamma, r, n_keys: γ, rank r and N keys per layer of
        the run (to say why two bounds coincide and why γ differs from the bounds view's). spike: (start, steps,
        factor) of the LR spike.
    Returns: HTML ("" without probed rows).
    """
    steps = np.asarray(series["steps"], dtype=float)
    if not len(steps):
        return ""
    over = {s: np.nan_to_num(np.asarray(y, float)) for s, y in series["overflows"].items()}
    zero = {s: np.nan_to_num(np.asarray(y, float)) for s, y in series.get("underflow_zero", {}).items()}
    sub = {s: np.nan_to_num(np.asarray(y, float)) for s, y in series.get("underflow_subnormal", {}).items()}
    err = {s: np.asarray(y, float) for s, y in series.get("error_softmax", {}).items()}
    cost = series.get("cost", {})
    hit = [s for s in over if over[s].sum() > 0]
    clean = [s for s in over if s not in hit]
    when = ""
    if spike is not None:
        start, length, factor = spike
        after = [s for s in hit if over[s][steps >= start].sum() > 0]
        when = (f" Through the LR spike (×{factor:g} from step {start}) and after it, "
                f"{_list(after) if after else 'no strategy'} overflowed.")
    take = (f"<b>In short:</b> over {len(steps)} steps <b>{_list(hit)}</b> overflowed; {_list(clean)} never did."
            + when)
    fine = [s for s in SCORES if s in zero and s != "dynamic"]
    coarse = [s for s in zero if s not in fine and s != "delayed"]  # one scale per tensor, from this step
    if fine and coarse:
        worst = max(coarse, key=lambda s: zero[s].sum() + sub[s].sum())
        best = min(fine, key=lambda s: zero[s].sum() + sub[s].sum())
        c = cost.get(best, {})
        take += (f" One scale per tensor is coarse: <b>{worst}</b> flushed {_n(zero[worst].sum())} scores to zero and "
                 f"{_n(sub[worst].sum())} to subnormals; <b>{best}</b> flushed {_n(zero[best].sum())} and "
                 f"{_n(sub[best].sum())} — and paid {_n(c.get('scales', 0))} scale values and "
                 f"{_n(c.get('reductions', 0))} reductions per step, each finished before its cast.")
    if "delayed" in zero and zero["delayed"].sum() > 0:
        first = zero["delayed"][0] + sub["delayed"][0]
        take += (f" Delayed scaling flushed {_n(zero['delayed'].sum() + sub['delayed'].sum())} in all, "
                 f"{_n(first)} of them at the first step (step {int(steps[0])}), before it had any history.")
    det = "deterministic" if "deterministic" in over else None
    if det:
        d = cost.get(det, {"scales": None, "reductions": 0})
        worst_case = np.asarray(series["bounds"]["worst case"], float)
        bound_ok = bool((np.asarray(series["observed"], float) <= worst_case).all())
        verb = "never overflowed" if not over[det].sum() else f"overflowed {_n(over[det].sum())} times"
        take += (f" The weight-derived <b>deterministic</b> scale {verb}"
                 f" with {_n(d['reductions'])} reductions: it is known before the scores are computed, and "
                 + ("max |S| stayed under its worst-case bound at every step — a guarantee, not a measurement."
                    if bound_ok else "max |S| broke its worst-case bound (check the folding)."))
    rows = []
    for s in over:
        e = err.get(s)
        rows.append(f"<tr><td>{html.escape(s)}</td><td>{_n(over[s].sum())}</td><td>{int((over[s] > 0).sum())}</td>"
                    + (f"<td>{_n(zero[s].sum())}</td><td>{_n(sub[s].sum())}</td><td>{np.nanmedian(e):.2%}</td>"
                       f"<td>{np.nanmax(e):.2%}</td>" if s in zero else "<td colspan=4>not recorded</td>")
                    + (f"<td>{_n(cost[s]['scales'])}</td><td>{_n(cost[s]['reductions'])}</td>" if s in cost
                       else "<td colspan=2></td>") + "</tr>")
    table = ("<table><tr><th>strategy</th><th>overflows</th><th>steps with one</th><th>to zero</th>"
             "<th>to subnormal</th><th>softmax error, median</th><th>max</th><th>scales / step</th>"
             "<th>reductions / step</th></tr>" + "".join(rows) + "</table>")
    where = ("<b>Where the bound from the weights still matters:</b> its scale exists before the scores do, so no "
             "reduction sits between the matmul and the cast, nothing is stored per row or block, and the worst case "
             "is a guarantee for any input. <b>Where it does not:</b> a per-row, per-block or per-tile scale from the "
             "scores themselves fits each row's range; it needs one reduction per scale before casting and stores "
             "every scale.")
    if "mx" in over:
        where += (f" MX follows the OCP rule X = ⌊log2 amax⌋ − {MX_EMAX_ELEM}, which leaves a block's maximum in "
                  f"[256, 512)·2^X while E4M3 ends at {E4M3_MAX:g}·2^X: block maxima whose mantissa is above "
                  f"{E4M3_CAST_OVERFLOW / 2**MX_EMAX_ELEM:g} are clipped to {E4M3_MAX:g}·2^X — counted as overflows "
                  f"here ({_n(over['mx'].sum())} over the run).")
    details = (f"<details class='spanviz-caption-details'><summary style='cursor:pointer'>Per strategy: overflows, "
               f"underflows, softmax error and cost (sums over the {len(steps)} steps and the layers)</summary>"
               f"{table}<p>{_bounds_text(series, gamma, r, n_keys)}</p><p>{where}</p></details>")
    return f"<div style='line-height:1.45; max-width:62em'>{take}{details}</div>"
