"""What a figure shows, in words made from the same data the figure draws: the captions under the panels' figures.

A caption quotes numbers of the run or view the student is looking at (never typed-in prose that can contradict
the figure beside it): each function takes the series the figure is drawn from and returns a short HTML
paragraph. The browser tests read these captions and check every number they quote against the figure's drawn
data (``tests/browser/test_captions_browser.py``).

Numbers: losses and logits with 3 or 4 significant digits, changes in percent with two decimals and a sign.
"""

from __future__ import annotations

import html
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from spanviz.plots.common import layer_series, series

PAPER_SPANS_CHANGE = -0.56
"""The spans paper's reported change of validation loss with [1000] against standard, in percent (arXiv
2512.13033, abstract: "0.56 % lower")."""
OVERLAP_PCT = 0.1
"""Below this spread of the runs' last validation losses (percent) the loss caption says the curves "lie on top of
each other"; from there up to 2 % it says "close together" (at a 2 % spread the curves are visibly apart)."""
PAPER_SPANS_MIN_D_HEAD = 64
"""The d_head from which secondary summaries of the spans paper report gains (not checked against its body)."""


def _p(text: str) -> str:
    return f"<div style='line-height:1.45; max-width:62em'>{text}</div>"


def _details(summary: str, body: str) -> str:
    """A collapsed ``<details>`` element: ``summary`` shown, ``body`` (the statistics) one click away."""
    return (f"<details class='spanviz-caption-details' style='margin-top:2px'><summary style='cursor:pointer'>"
            f"{summary}</summary>{body}</details>")


def _e(text: Any) -> str:
    return html.escape(str(text))


def _pct(x: float) -> str:
    return f"{x:+.2f} %".replace("-", "−")


def _num(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}g}"


def _big(x: float) -> str:
    """3 significant digits, grouped thousands and no exponent: 25143.7 → "25,100", 15.14 → "15.1"."""
    return f"{float(f'{x:.3g}'):,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def _count(n: float) -> str:
    return f"{int(round(n)):,}"


# ------------------------------------------------------------------------------------------------ loss curves
def loss_caption(histories: Mapping[str, Mapping[str, Sequence[Any]]]) -> str:
    """The last validation loss of every run (the dashed curves' last points), and whether the curves coincide.

    Args: histories: ``{label: history}`` as the loss figure draws them (``step``, ``train_loss``, ``val_loss``).
    Returns: HTML ("" before any evaluation).
    """
    last = {}
    for label, h in histories.items():
        if "val_loss" not in h or "step" not in h:
            continue
        steps, values = series(h, "val_loss")
        if len(steps):
            last[label] = (int(steps[-1]), float(values[-1]))
    if not last:
        return ""
    parts = [f"{_e(label)} {value:.4g} (step {step})" for label, (step, value) in last.items()]
    text = "<b>Last validation loss</b>: " + "; ".join(parts) + "."
    # Compared only once every run has learnt something: at step 0 runs of one seed start at the same loss, and
    # "within 0.00 %" would say nothing about how they end.
    if len(last) > 1 and min(step for step, _ in last.values()) > 0:
        values = [v for _, v in last.values()]
        spread = 100.0 * (max(values) / min(values) - 1.0)
        if spread < 2.0:
            closeness = "lie on top of each other" if spread < OVERLAP_PCT else "lie close together"
            text += (f" The runs end within {spread:.2f} % of each other, so their curves {closeness}: "
                     "each run is drawn narrower than the one before it (and with its own marker), so every one "
                     "stays visible.")
    return _p(text)


# ------------------------------------------------------------------------------------------------------ spans
def spans_change_caption(
    delta: Mapping[str, Any] | None,
    *,
    alpha_label: str,
    alphas: Sequence[float],
    twin_label: str,
    seed: int,
    d_head: int,
    d_model: int,
    n_layer: int,
    steps_planned: int,
) -> str:
    """What the spans notebook's comparison shows — the α run's change of validation loss against standard, set
    against the seed band — and why it can differ from the paper, from the run on screen.

    Args:
        delta: :func:`spanviz.plots.curves.relative_change_series` of the three runs (``steps``, ``changes`` with one
            entry, ``noise``), or None before any common evaluation.
        alpha_label, alphas: the α run's label and (α0..α3). twin_label, seed: the noise run's label and the
            seed of standard. d_head, d_model, n_layer: the model. steps_planned: steps per run.
    Returns: HTML ("" without data).
    """
    if delta is None or not len(delta["steps"]) or not delta["changes"]:
        return ""
    steps = np.asarray(delta["steps"], dtype=float)
    change = np.asarray(next(iter(delta["changes"].values())), dtype=float)
    noise = None if delta.get("noise") is None else np.abs(np.asarray(delta["noise"], dtype=float))
    last_step, last = int(steps[-1]), float(change[-1])
    done = last_step + 1 >= steps_planned
    when = f"At the last evaluation (step {last_step})" if done else \
        f"So far, at step {last_step} of {steps_planned},"
    direction = "higher" if last > 0 else "lower" if last < 0 else "the same"
    sense = "worse" if last > 0 else "better"  # said only once the change is outside the seed band
    text = (f"<b>What this run shows.</b> {when} the α run {_e(alpha_label)} had a validation loss "
            f"<b>{_pct(last)}</b> against standard ({direction}).")
    if noise is not None and len(noise) > 1:
        band, k = float(noise[-1]), int(np.argmax(noise))
        text += (f" The gray band — {_e(twin_label)} against seed {seed} — is ±{band:.2f} % there and at most "
                 f"±{float(noise[k]):.2f} % over the run (step {int(steps[k])}).")
        if abs(last) > float(noise.max()):
            text += (f" The change is <b>outside the band</b>, wider than any seed difference of the run: in this run "
                     f"the α run ended <b>{sense}</b> than standard (one seed pair: a sweep over seeds tests it).")
        elif abs(last) > band:
            text += " The change is outside the band at this step, but not wider than the band elsewhere in the run."
        else:
            text += (" The change is <b>inside the band</b>: not told apart from the seed noise — not shown, which "
                     "is not the same as no effect.")
    else:
        text += " No seed band yet: whether the change is more than seed noise is not known."
    k = int(np.argmax(np.abs(change)))
    text += f" Largest change over the run: {_pct(float(change[k]))} (step {int(steps[k])})."
    if all(a == 1.0 for a in alphas):
        text += (" With every α = 1 the hook hands dS back untouched; without dropout the run trains on the same fused "
                 "attention path as standard, bit for bit, so the change is 0; with dropout it stays on the explicit "
                 "path, whose float rounding and dropout masks differ from standard's.")
        return _p(text)
    reasons = []
    if d_head < PAPER_SPANS_MIN_D_HEAD:
        reasons.append(f"d_head = {d_head} here, below the d_head ≥ {PAPER_SPANS_MIN_D_HEAD} at which secondary "
                       "summaries report gains")
    reasons.append(f"{steps_planned} steps of a {n_layer}-layer model with d_model {d_model}, not a full training run")
    reasons.append("the band is one extra seed, a rough estimate of the noise (<code>spanviz sweep spans</code> runs "
                   "5 seeds and a paired test)")
    text += (f"<br><b>Why it can differ from the paper</b> (abstract: {_pct(PAPER_SPANS_CHANGE)} with [1000] on "
             "WikiText-2): " + "; ".join(reasons) + ".")
    return _p(text)


def angles_caption(angles: Mapping[str, Any], *, layer: int, head: int, context: int, d_head: int) -> str:
    """What the principal-angles chart shows, with its smallest and median angle per pair.

    Args: angles: ``{"Q–K": radians (k,), ...}`` as the chart draws them (ascending). layer, head: the picked
        ones. context: T. d_head: the spans' dimension.
    Returns: HTML.
    """
    deg = {pair: np.degrees(np.asarray(a, dtype=float)) for pair, a in angles.items()}
    smallest = ", ".join(f"{_e(p)} {d[0]:.1f}°" for p, d in deg.items() if len(d))
    median = ", ".join(f"{_e(p)} {float(np.median(d)):.1f}°" for p, d in deg.items() if len(d))
    return _p(
        f"<b>Principal angles</b> (layer {layer}, head {head}, one batch through the untrained model): each of Q, K "
        f"and V spans a {d_head}-dimensional subspace of token space ℝ<sup>{context}</sup>. Two such subspaces "
        f"have {d_head} principal angles, smallest first: 0° is a direction both contain, 90° one of them is "
        f"orthogonal to. Smallest: {smallest}; median: {median}. All three are linear maps of the same layer "
        "input X (Q = XW<sup>Q</sup>, …), so they share directions: the first angles are near 0°. The projectors Π "
        "and Π<sup>⊥</sup> of the blocks split dS along these subspaces: the less two spans overlap, the more of "
        "the gradient lands in the blocks with a ⊥ factor (the violations)."
    )


# ------------------------------------------------------------------------------------------------ local/global
def max_logit_caption(histories: Mapping[str, Mapping[str, Sequence[Any]]], key: str = "logits/max_per_layer") -> str:
    """The peak of each run's max-logit curves (which layer, which step) and the later runs against the first.

    Returns: HTML ("" without probed rows).
    """
    peaks = {}
    for label, h in histories.items():
        if key not in h:
            continue
        steps, values = layer_series(h, key)
        if values.size:
            i, layer = np.unravel_index(int(np.argmax(values)), values.shape)
            peaks[label] = (float(values[i, layer]), int(layer), int(steps[i]))
    if not peaks:
        return ""
    parts = [f"{_e(label)} {v:.3g} (layer {layer}, step {step})" for label, (v, layer, step) in peaks.items()]
    text = "<b>Peak max logit over the run</b>: " + "; ".join(parts) + "."
    labels = list(peaks)
    for label in labels[1:]:
        text += f" {_e(label)} against {_e(labels[0])}: {_pct(100.0 * (peaks[label][0] / peaks[labels[0]][0] - 1))}."
    if len(labels) > 1:
        text += " One seed each: <code>spanviz sweep ls</code> tells whether such a difference holds over seeds."
    return _p(text)


def seed_peaks_caption(peaks: Mapping[str, Sequence[tuple[float, float]]], what: str = "peak") -> str:
    """Each variant's per-seed peaks (the stars of the figure) with their mean ± standard deviation (ddof 1).

    Args: peaks: :func:`spanviz.plots.seed_peaks`. what: the quantity's name, e.g. "peak max logit".
    Returns: HTML ("" without peaks).
    """
    parts = []
    for name, rows in peaks.items():
        values = [v for _, v in rows]
        if not values:
            continue
        spread = f" ± {statistics.stdev(values):.3g}" if len(values) > 1 else ""
        parts.append(f"{_e(name)} {', '.join(f'{v:.3g}' for v in values)} (mean {statistics.fmean(values):.3g}"
                     f"{spread})")
    if not parts:
        return ""
    return _p(f"<span class='spanviz-caption-peaks'><b>{_e(what[:1].upper() + what[1:])} of each seed</b> (the "
              f"stars): " + "; ".join(parts) + ".</span>")


# ----------------------------------------------------------------------------------------------------------- FP8
def bounds_caption(curves: Mapping[str, Any], *, sigma: Sequence[float], d: int, d_head: int, delta: float,
                   n_keys: int) -> str:
    """How the rank-aware bound depends on r, said as the bounds-vs-rank figure shows it: its value at the compared
    ranks, the √(r/d_head) reference, γ(r), and σ(r).

    Compares the picked r with r = d_head (with r = 1 when r = d_head is picked).

    Args: curves: :meth:`spanviz.fp8.demos.BoundsVsRank.curves` (``ranks``, ``bounds``, ``reference``, ``gamma``,
        ``r``). sigma: σ per rank (same order). d: the input dimension (γ·r is capped at d). d_head: the largest
        rank. delta: δ. n_keys: N keys.
    Returns: HTML.
    """
    ranks = np.asarray(curves["ranks"])
    r = int(curves["r"])
    low = 1 if r == d_head else r
    aware_name = next(k for k in curves["bounds"] if k.startswith("rank-aware"))
    agn_name = next(k for k in curves["bounds"] if k.startswith("rank-agnostic"))
    aware, agn = np.asarray(curves["bounds"][aware_name]), np.asarray(curves["bounds"][agn_name])
    gamma, sigma = np.asarray(curves["gamma"]), np.asarray(sigma, dtype=float)
    i, j = int(np.flatnonzero(ranks == low)[0]), int(np.flatnonzero(ranks == d_head)[0])
    total = aware[i] / aware[j]
    ref = math.sqrt(low / d_head)
    s_ratio = sigma[i] / sigma[j]
    # B_rank-aware ∝ σ · √min(γ r, d): the two factors of the ratio
    energy_j, energy_i = min(gamma[j] * d_head, d), min(gamma[i] * low, d)
    g_ratio = math.sqrt(energy_i / energy_j)
    if total > ref + 0.005:
        how = (f"only ×{total:.2f} as large, not the ×{ref:.2f} that √(r/d_head) would give: with fewer directions, γ "
               "grows and takes back part of the gain.")
    else:
        than = "just" if total >= ref - 0.005 else "even less than"
        how = f"×{total:.2f} as large, {than} the ×{ref:.2f} of √(r/d_head)."
    takeaway = f"<b>In short:</b> rank r = {low} instead of {d_head} makes the rank-aware bound {how}"
    text = (f"<b>Rank r = {low} against r = d_head = {d_head}</b> (δ = {delta:g}): the rank-aware bound goes from "
            f"{aware[j]:.3g} to {aware[i]:.3g}, <b>×{total:.2f}</b> — not ×{ref:.2f}, the √(r/d_head) of the dotted "
            f"line. It goes like σ·√(γ·r), and γ is solved from δ and r — (r/2)(γ − 1 − ln γ) = ln(2N/δ), N = "
            f"{n_keys} keys — so it grows as r shrinks: γ = {gamma[j]:.3g} at r = {d_head}, {gamma[i]:.3g} at r = "
            f"{low} (a key's share of energy in fewer directions fluctuates more). So γ·r (at most d = {d}) falls only "
            f"from {energy_j:.3g} to {energy_i:.3g}, and √ of that is ×{g_ratio:.2f}; σ of the rank-{low} "
            f"W^Q W^Kᵀ is ×{s_ratio:.2f} of the full one's: ×{g_ratio:.2f} · ×{s_ratio:.2f} = ×{total:.2f}.")
    gap = 100.0 * (agn[j] / aware[j] - 1.0)
    if gap < 5.0:
        text += (f" At r = {d_head} the rank-aware and rank-agnostic bounds are {gap:.1f} % apart (γ·r = "
                 f"{energy_j:.3g}, close to d = {d}): their lines nearly coincide there.")
    return _p(takeaway + _details("How that comes about: γ, σ and the two factors", text))


# ---------------------------------------------------------------------------------------------- growth lab
def growth_caption(rows: Sequence[Mapping[str, Any]], labels: Mapping[str, str], baseline: str = "mhsa") -> str:
    """What the logit-growth lab's figure shows, in plain words first: how MHSA's peak max logit and final loss move
    from the lowest to the highest learning rate, then each fix's peak at the highest rate against MHSA's (apart or
    not, against the seed spread); the statistics (mean ± std, paired tests, Holm) in a collapsed details element.

    Args: rows: :func:`spanviz.experiments.growth.summarize_growth`'s ``rows`` (the figure's seeds, summarised).
        labels: variant → name (the figure's legend). baseline: the variant the others are compared with.
    Returns: HTML ("" without the baseline's peak rows).
    """
    by = {(r["variant"], r["metric"], r["lr"]): r for r in rows}
    lrs = sorted({r["lr"] for r in rows})
    if not lrs or by.get((baseline, "peak_max_logit", lrs[0]), {}).get("mean") is None:
        return ""
    hi = max((lr for lr in lrs if by.get((baseline, "peak_max_logit", lr), {}).get("mean") is not None))
    lo = lrs[0]
    p_lo, p_hi = by[(baseline, "peak_max_logit", lo)], by[(baseline, "peak_max_logit", hi)]
    l_lo, l_hi = by.get((baseline, "final_val_loss", lo), {}), by.get((baseline, "final_val_loss", hi), {})
    name = labels.get(baseline, baseline).split(" (")[0]  # "MHSA (baseline)" → "MHSA"
    head = (f"<b>Raise the learning rate from {lo:g} to {hi:g} and {_e(name)}'s largest attention logit grows "
            f"×{_big(p_hi['mean'] / p_lo['mean'])}, from {_big(p_lo['mean'])} to {_big(p_hi['mean'])}</b>")
    if l_lo.get("mean") is not None and l_hi.get("mean") is not None:
        head += f", while its final loss goes from {l_lo['mean']:.3f} to {l_hi['mean']:.3f} nats"
    lines = [head + "."]
    for variant in dict.fromkeys(r["variant"] for r in rows):
        row = by.get((variant, "peak_max_logit", hi))
        if variant == baseline or row is None or row["mean"] is None:
            continue
        # apart when the means of log10 peak differ by more than 5× the larger seed band (std over seeds)
        logs = by.get((variant, "log10_peak_max_logit", hi)), by.get((baseline, "log10_peak_max_logit", hi))
        apart = None not in logs and None not in (logs[0]["std"], logs[1]["std"]) and (
            abs(logs[0]["mean"] - logs[1]["mean"]) > 5 * max(logs[0]["std"], logs[1]["std"]))
        loss = by.get((variant, "final_val_loss", hi), {})
        loss_text = (f", final loss {loss['mean']:.3f}" if loss.get("mean") is not None else
                     f", {loss.get('n_diverged', 0)} of {loss.get('n_runs', 0)} runs diverged")
        where = ("clearly apart (more than 5× the seed band)" if apart else
                 "not clearly apart (within 5× the seed band)")
        lines.append(f"{_e(labels.get(variant, variant))}: peak {_big(row['mean'])} at lr {hi:g} — "
                     f"×{row['mean'] / p_hi['mean']:.2g} of {_e(name)}'s, {where}{loss_text}.")
    def cell(r: Mapping[str, Any]) -> str:
        if r["mean"] is None:
            return "–"
        return f"{r['mean']:.4g}" + ("" if r.get("std") is None else f" ± {r['std']:.2g}")

    details = "".join(f"<tr><td>{_e(labels.get(r['variant'], r['variant']))}</td><td>{r['lr']:g}</td>"
                      f"<td>{_e(r['metric'])}</td><td>{cell(r)}</td><td>{_e(r['verdict'])}</td></tr>" for r in rows)
    n = p_hi.get("n_runs")
    return _p("<br>".join(lines) + f"<details><summary>the statistics ({n} seeds per point; paired by seed against "
              f"{_e(name)} at each learning rate, Holm-corrected across the sweep)</summary><table><tr><th>variant</th>"
              f"<th>lr</th><th>metric</th><th>mean ± std</th><th>verdict</th></tr>{details}</table></details>")


# ---------------------------------------------------------------------------------------------- α response
def alpha_response_caption(rows: Sequence[Mapping[str, Any]], shares: Mapping[int, float]) -> str:
    """What the α-response figure shows, plain words first: whether removing or doubling one order's block moves
    the best validation loss beyond the seed noise (flat curves said as such), against the yardstick [0000] (no
    score gradient), the order that moved most with its share of ‖dS‖², and the paper's [1000]; the per-variant
    statistics in a collapsed details element.

    Args: rows, shares: :func:`spanviz.experiments.alphas.summarize_alphas`'s ``rows`` and ``shares`` (what the
        figure draws). Returns: HTML ("" without compared rows).
    """
    moved = [r for r in rows if r.get("order") is not None and r.get("rel_change_pct") is not None]
    if not moved:
        return ""
    big = max(moved, key=lambda r: abs(r["rel_change_pct"]))
    low, high = min(r["rel_change_pct"] for r in moved), max(r["rel_change_pct"] for r in moved)
    flat = [o for o in sorted({r["order"] for r in moved})
            if all(r["verdict"].startswith("within noise") for r in moved if r["order"] == o)]
    refs = {r["variant"]: r for r in rows if r.get("order") is None and r.get("alpha") is None
            and r.get("rel_change_pct") is not None}  # fmt: skip
    off = refs.get("[0000]")
    if len(flat) == len({r["order"] for r in moved}):
        head = (f"<b>Removing or doubling any one order's block moved the best validation loss by "
                f"{_pct(low)} … {_pct(high)} — within the seed noise for every order: these curves are flat.</b>")
    else:
        head = (f"<b>The biggest effect: α{big['order']} = {big['alpha']:g} changes the best validation loss by "
                f"{_pct(big['rel_change_pct'])}</b> ({_e(big['verdict'])}); flat (within noise): order"
                f"{'s' * (len(flat) != 1)} {', '.join(map(str, flat)) or 'none'}.")
    lines = [head]
    if off is not None and off["verdict"].startswith("significant"):
        lines.append(f"For scale: with no score gradient at all ([0000], the hexagon) the loss changes by "
                     f"{_pct(off['rel_change_pct'])} ({_e(off['verdict'])}) — the score gradient matters; how it is "
                     f"split between orders barely does at this size.")
    elif off is not None:
        lines.append(f"For scale: even with no score gradient at all ([0000], the hexagon: W^Q and W^K never learn "
                     f"through the attention) the loss changes by only {_pct(off['rel_change_pct'])} "
                     f"({_e(off['verdict'])}). At this size and length what the attention logits learn hardly moves "
                     f"the loss, so no α setting can show an effect here; what α does to the gradient itself is on "
                     f"the right (the share of ‖dS‖² an α of 0 removes) and in the panel below.")
    if big["order"] in shares:
        lines.append(f"Order {big['order']}, the one that moved most, carries {100 * shares[big['order']]:.3g} % of "
                     f"‖dS‖² (right).")
    if "[1000]" in refs:
        r = refs["[1000]"]
        lines.append(f"The paper's [1000] (orders 1–3 removed at once; the paper reports {_pct(PAPER_SPANS_CHANGE)}): "
                     f"{_pct(r['rel_change_pct'])}, {_e(r['verdict'])}.")

    def cell(r: Mapping[str, Any]) -> str:
        if r.get("rel_change_pct") is None:
            return "the reference"
        return f"{_pct(r['rel_change_pct'])} ({_pct(r['rel_ci_low_pct'])} … {_pct(r['rel_ci_high_pct'])})"

    table = "".join(f"<tr><td>{_e(r['variant'])}</td><td>{r['mean']:.4f}</td><td>{cell(r)}</td>"
                    f"<td>{_e(r['verdict'])}</td></tr>" for r in rows if r.get("mean") is not None)
    n = rows[0].get("n_runs")
    return _p("<br>".join(lines) + f"<details><summary>the statistics ({n} seeds per variant; best validation loss, "
              f"paired by seed against standard, Holm-corrected across the sweep)</summary><table><tr><th>variant"
              f"</th><th>best val loss (nats)</th><th>change (95 % CI)</th><th>verdict</th></tr>{table}</table>"
              f"</details>")


__all__ = ["OVERLAP_PCT", "PAPER_SPANS_CHANGE", "PAPER_SPANS_MIN_D_HEAD", "alpha_response_caption", "angles_caption",
           "bounds_caption", "growth_caption", "loss_caption", "max_logit_caption", "seed_peaks_caption",
           "spans_change_caption"]
