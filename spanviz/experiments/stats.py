"""Statistics of a sweep: per-seed tables, paired tests over seeds, Holm's correction, verdicts.

Runs with the same seed share initial weights, batch order and evaluation batches, so each comparison is a
**paired** t-test on the per-seed differences (95 % confidence interval, t, df, p), with Welch's unpaired test
beside it as a check; the p-values of all comparisons of one sweep are **Holm**-corrected together, and a
verdict reads "significant at 5 % after Holm: ..." or "within noise" (:data:`WITHIN_NOISE`, :func:`significant_words`;
:func:`claim_verdict` words a directional claim, :func:`equivalence_test` is the paired TOST that any claim of
equality needs — the docs take their verdict words from here). To recompute a sweep's verdicts, read its
per-seed file (:func:`spanviz.experiments.results.read_per_seed`) and call :func:`compare_groups` with the
``comparisons`` listed in its summary. The per-seed table of a sweep's records, and :func:`summarize
<spanviz.experiments.results.summarize>` (one comparison in one call), are in :mod:`spanviz.experiments.results`.

Source: SciPy's paired and Welch t-tests; S. Holm (1979).
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Mapping, Sequence
from typing import Any


def _scipy_stats() -> Any:
    """``scipy.stats``, imported on first use: importing it takes about 1 s on 2 cores, and ``spanviz.widgets``
    imports this module before figures that need no test (notebook 03's bounds)."""
    from scipy import stats

    return stats


ALPHA = 0.05
"""Family-wise significance level of the verdicts (Holm-corrected across the comparisons of one sweep)."""
CONFIDENCE = 0.95
"""Level of the confidence intervals of paired differences."""

# ============================================================================================ verdict words
# The words a verdict may use, in one place: the sweeps' verdicts (compare_groups), the docs and notebooks
# (rendered from docs/results/ by scripts/render_docs.py) all take them from here. A comparison is
# "significant at 5 % after Holm" or "within noise" (not established — never "no effect"); a claim that did not
# pass its test is "not shown to ..."; equality is only claimed after an equivalence test (TOST).
WITHIN_NOISE = "within noise"
"""Verdict of a comparison whose Holm-adjusted paired p is not below the level: the difference is not established."""
NO_DIFFERENCE = "no difference in any seed"
"""Verdict when both arms are equal seed by seed: nothing to test (left out of the Holm family)."""
NO_EQUIVALENCE_TEST = "no equivalence test was done"
"""To be said beside a "within noise" result wherever a reader could take it for equality."""


def significant_words(alpha: float = ALPHA) -> str:
    """"significant at 5 % after Holm" (5 = 100·alpha): the verdict words of a comparison that passed its test."""
    return f"significant at {100 * alpha:g} % after Holm"


def claim_verdict(row: Mapping[str, Any], direction: str, claim: str | None = None, *, alpha: float = ALPHA) -> str:
    """What a :func:`compare_groups` row allows one to say about the claim "the variant is ``direction`` than
    its baseline", in the words of its test.

    Args:
        row: a compared row (with ``p_holm``, ``diff``, ``n_pairs``).
        direction: "lower" or "higher" — the claim's direction.
        claim: how the claim reads after "shown to" / "not shown to" (default "be lower" / "be higher"), e.g.
            "grow less".
        alpha: the family-wise level the row was judged at.
    Returns:
        "shown to CLAIM (significant at 5 % after Holm)" when the Holm-adjusted paired p < alpha in the claim's
        direction; "not shown to CLAIM (significant at 5 % after Holm the other way: higher)" when it passed in the
        opposite direction; "not shown to CLAIM (within noise)" otherwise; the row's own verdict ("cannot tell: one
        seed", "no paired seeds") without two pairs.
    Raises:
        ValueError: direction not "lower" / "higher", or a row without a test (a baseline row).
    """
    if direction not in ("lower", "higher"):
        raise ValueError(f"direction must be 'lower' or 'higher', got {direction!r}")
    if "p_holm" not in row or row.get("n_pairs") is None:
        raise ValueError(f"row has no paired test (verdict {row.get('verdict')!r}); pass a compared row")
    claim = claim or f"be {direction}"
    if row["n_pairs"] < 2:
        return str(row.get("verdict"))  # "cannot tell: one seed" / "no paired seeds"
    if row.get("p_holm") is None or row["p_holm"] >= alpha:
        return f"not shown to {claim} ({WITHIN_NOISE})"
    if (row["diff"] < 0) == (direction == "lower"):
        return f"shown to {claim} ({significant_words(alpha)})"
    other = "higher" if direction == "lower" else "lower"
    return f"not shown to {claim} ({significant_words(alpha)} the other way: {other})"


# ========================================================================================== statistics
def paired_comparison(
    baseline: Mapping[int, float | None],
    variant: Mapping[int, float | None],
    *,
    confidence: float = CONFIDENCE,
) -> dict[str, Any]:
    """Paired t-test (primary) and Welch's t-test (check) of ``variant − baseline`` over seeds.

    Runs with the same seed share initial weights, batch order and evaluation batches, so the primary test
    pairs them: d_s = variant[s] − baseline[s] over the seeds both have, t = mean(d)/(sd(d)/√n), df = n − 1
    (``scipy.stats.ttest_rel``), two-sided, with the t-based confidence interval of mean(d). Welch's unpaired
    test (``scipy.stats.ttest_ind(equal_var=False)``) over every finite value of each arm is reported beside
    it as a check. No multiple-comparison correction here: see :func:`holm` / :func:`compare_groups`.

    Args:
        baseline, variant: seed → value (e.g. best validation loss); None and non-finite values are ignored.
        confidence: of the interval, in (0, 1).
    Returns:
        dict with ``n_pairs``, ``seeds`` (paired, sorted), ``baseline_mean`` (over the paired seeds),
        ``diff`` (mean paired difference), ``diff_std`` (its sample sd), ``ci_low`` / ``ci_high``,
        ``rel_change_pct`` / ``rel_ci_low_pct`` / ``rel_ci_high_pct`` (the same, in % of ``|baseline_mean|``),
        ``t``, ``df``, ``p`` (paired), ``welch_t``, ``welch_df``, ``welch_p``. Statistics that need two pairs
        (two values per arm for Welch) are None with fewer. When every paired difference is the same, sd = 0:
        ``t`` is None and ``p`` is None if that difference is 0 (the arms are identical in every seed:
        nothing to test), else 0.0 (the limit of t → ±∞).
    Raises:
        ValueError: confidence outside (0, 1), or a mapping key that is not an integer seed.
    Source: Student's paired t-test and Welch's t-test as implemented by SciPy.
    """
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 < confidence < 1:
        raise ValueError(f"confidence must be a number in (0, 1), got {confidence!r}")
    base, var = _finite_by_seed("baseline", baseline), _finite_by_seed("variant", variant)
    seeds = sorted(set(base) & set(var))
    n = len(seeds)
    out: dict[str, Any] = dict.fromkeys(_COMPARISON_KEYS)
    out.update(n_pairs=n, seeds=seeds)
    if n:
        diffs = [var[s] - base[s] for s in seeds]
        out["baseline_mean"] = statistics.fmean(base[s] for s in seeds)
        out["diff"] = statistics.fmean(diffs)
    if n >= 2:
        out["diff_std"] = statistics.stdev(diffs)
        out["df"] = n - 1
        if out["diff_std"] == 0:  # the same difference in every seed: no spread, the t statistic is undefined
            out["ci_low"] = out["ci_high"] = out["diff"]
            out["p"] = None if out["diff"] == 0 else 0.0  # identical arms: nothing to test (left out of Holm)
        else:
            with warnings.catch_warnings():  # near-identical arms: SciPy warns about cancellation; harmless here
                warnings.simplefilter("ignore", RuntimeWarning)
                paired = _scipy_stats().ttest_rel([var[s] for s in seeds], [base[s] for s in seeds])
            ci = paired.confidence_interval(confidence)
            out.update(t=float(paired.statistic), p=float(paired.pvalue), ci_low=float(ci.low),
                       ci_high=float(ci.high))  # fmt: skip
    if len(base) >= 2 and len(var) >= 2:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            welch = _scipy_stats().ttest_ind(list(var.values()), list(base.values()), equal_var=False)
        out.update(welch_t=_finite(welch.statistic), welch_df=_finite(welch.df), welch_p=_finite(welch.pvalue))
    ref = out["baseline_mean"]
    if ref:  # not None, not 0
        for key, rel in (("diff", "rel_change_pct"), ("ci_low", "rel_ci_low_pct"), ("ci_high", "rel_ci_high_pct")):
            if out[key] is not None:
                out[rel] = 100.0 * out[key] / abs(ref)
    return out


def equivalence_test(
    baseline: Mapping[int, float | None],
    variant: Mapping[int, float | None],
    margin: float,
    *,
    relative: bool = False,
    alpha: float = ALPHA,
) -> dict[str, Any]:
    """Paired equivalence test (TOST) of ``variant − baseline`` over seeds: is |mean difference| < margin?

    Two one-sided paired t-tests on d_s = variant[s] − baseline[s] (``scipy.stats.ttest_1samp`` with
    ``alternative``): H0₁ mean(d) ≤ −Δ against mean(d) > −Δ, and H0₂ mean(d) ≥ +Δ against mean(d) < +Δ; the
    TOST p is the larger of the two, and equivalence within ±Δ is shown when it is below ``alpha`` (the same
    as the (1 − 2·alpha) confidence interval of mean(d) lying inside ±Δ). The margin must be fixed before
    looking at the data (a published figure, a tolerance) — a margin chosen from the result proves nothing.
    Not part of any Holm family.

    Args:
        baseline, variant: seed → value; None and non-finite values are ignored; seeds in both are paired.
        margin: Δ > 0, in the metric's units, or in % of |mean(baseline)| over the paired seeds with ``relative``.
        relative: read ``margin`` as a percentage of the baseline mean.
        alpha: level of each one-sided test, in (0, 1).
    Returns:
        dict with ``n_pairs``, ``diff`` (mean paired difference), ``margin`` (Δ, absolute), ``margin_pct`` (when
        relative), ``p_lower`` / ``p_upper`` (the one-sided p-values against −Δ and +Δ), ``p`` (TOST p, the
        larger), ``equivalent`` (bool), ``claim`` ("equivalent within ±Δ" or "not shown to be equivalent within
        ±Δ") and ``verdict`` (the claim with "(paired TOST, p = …)"). With fewer than two pairs, or differences
        without spread, the p-values are None and ``equivalent`` is False.
    Raises:
        ValueError: margin not a number > 0, alpha outside (0, 1), or a mapping key that is not an integer seed.
    Source: D. J. Schuirmann (1987), the two one-sided tests procedure; SciPy's one-sample t-test.
    """
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(margin) or margin <= 0:
        raise ValueError(f"margin must be a finite number > 0, got {margin!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}")
    base, var = _finite_by_seed("baseline", baseline), _finite_by_seed("variant", variant)
    seeds = sorted(set(base) & set(var))
    diffs = [var[s] - base[s] for s in seeds]
    out: dict[str, Any] = {"n_pairs": len(seeds), "diff": statistics.fmean(diffs) if diffs else None,
                           "p_lower": None, "p_upper": None, "p": None, "equivalent": False}  # fmt: skip
    delta = float(margin)
    if relative:
        ref = abs(statistics.fmean(base[s] for s in seeds)) if seeds else 0.0
        out["margin_pct"] = delta
        delta = delta / 100.0 * ref
    out["margin"] = delta
    if len(diffs) >= 2 and statistics.stdev(diffs) > 0 and delta > 0:
        lower = _scipy_stats().ttest_1samp(diffs, -delta, alternative="greater")
        upper = _scipy_stats().ttest_1samp(diffs, delta, alternative="less")
        out.update(p_lower=float(lower.pvalue), p_upper=float(upper.pvalue))
        out["p"] = max(out["p_lower"], out["p_upper"])
        out["equivalent"] = out["p"] < alpha
    bound = f"±{out['margin_pct']:g} %" if relative else f"±{delta:g}"
    p_text = "p undefined" if out["p"] is None else f"p = {out['p']:.2g}"
    out["claim"] = f"{'equivalent' if out['equivalent'] else 'not shown to be equivalent'} within {bound}"
    out["verdict"] = f"{out['claim']} (paired TOST, {p_text})"
    return out


_COMPARISON_KEYS = ("n_pairs", "seeds", "baseline_mean", "diff", "diff_std", "ci_low", "ci_high", "rel_change_pct",
                    "rel_ci_low_pct", "rel_ci_high_pct", "t", "df", "p", "welch_t", "welch_df", "welch_p")  # fmt: skip


def _finite(x: Any) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _finite_by_seed(name: str, values: Mapping[Any, Any]) -> dict[int, float]:
    if not isinstance(values, Mapping):
        raise ValueError(f"{name} must be a mapping seed → value, got {type(values).__name__}")
    out = {}
    for seed, value in values.items():
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"{name} keys must be integer seeds, got {seed!r}")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[seed] = float(value)
    return out


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (family-wise error control), in the order given.

    With the m non-None p-values sorted ascending p₍₁₎ ≤ … ≤ p₍ₘ₎: p̃₍ᵢ₎ = max_{j ≤ i} min(1, (m − j + 1)·p₍ⱼ₎).
    Rejecting every hypothesis with p̃ < α keeps the chance of any false rejection ≤ α, for any dependence
    between the tests. None stays None and does not count in m.

    Raises: ValueError for a p-value outside [0, 1].
    Source: S. Holm, "A simple sequentially rejective multiple test procedure", Scand. J. Statist. 6 (1979).
    """
    present = [(p, i) for i, p in enumerate(pvalues) if p is not None]
    for p, _ in present:
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise ValueError(f"p-values must be numbers in [0, 1] or None, got {p!r}")
    m = len(present)
    adjusted: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(sorted(present)):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def compare_groups(
    table: Sequence[Mapping[str, Any]],
    comparisons: Sequence[Mapping[str, Any]],
    *,
    alpha: float = ALPHA,
    confidence: float = CONFIDENCE,
) -> list[dict[str, Any]]:
    """Summary rows with paired tests, Holm-corrected across every comparison given (one family).

    The entry point for recomputing a sweep's verdicts from its per-seed table: pass the rows of a
    ``per_seed`` JSON/CSV file (:func:`~spanviz.experiments.results.read_per_seed`) and the ``comparisons`` of
    its summary.

    Args:
        table: per-seed rows, each with the grouping column (``by``), ``seed``, the metric and optionally
            ``status`` (as from :func:`per_seed_table`).
        comparisons: dicts with ``baseline`` (a name, or None for description only), ``metric`` (a column),
            optional ``variants`` (names, in row order; default: every name in the filtered table, in order of
            first appearance), ``by`` (the grouping column, default "variant"), ``where`` (column → value
            filter, e.g. ``{"variant": "lr_spike/margin=0"}``), ``lower_is_better`` (default True); any other
            keys (e.g. ``group``, ``n_head``) are copied into that comparison's rows.
        alpha: family-wise significance level (Holm). confidence: of the intervals.
    Returns:
        One row per (comparison, name), in order: the extra keys, ``<by>`` (the name), ``metric``, ``n`` (finite
        values), ``n_diverged``, ``n_runs``, ``mean``, ``std`` (ddof 1; None for n < 2), ``min``, ``max``, the
        :func:`paired_comparison` columns against the baseline (None for the baseline row), ``p_holm`` and
        ``verdict``: "baseline"; "significant at 5 % after Holm: lower (better) than <baseline>" (or higher /
        worse; 5 = 100·alpha) when the Holm-adjusted paired p < alpha; "within noise" otherwise; "no
        difference in any seed" when the arms are equal seed by seed (no test; not in the family); "cannot
        tell: one seed" / "no paired seeds" with fewer than two pairs; "; k of N runs diverged" appended when
        some did. The same (where, by, baseline, name, metric) listed twice counts once in the family.
    Raises:
        ValueError: bad table or comparisons (unknown column, baseline not among the names, ...), or alpha /
            confidence outside (0, 1).
    """
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}")
    table = [dict(row) for row in table]
    if not table:
        raise ValueError("table must hold at least one per-seed row, got none")
    rows: list[dict[str, Any]] = []
    tested: dict[tuple[str, ...], dict[str, Any]] = {}  # one family member per distinct comparison
    for c, spec in enumerate(comparisons):
        spec = dict(spec)
        by, metric, baseline = spec.pop("by", "variant"), spec.pop("metric", None), spec.pop("baseline", None)
        where, lower_is_better = spec.pop("where", None) or {}, spec.pop("lower_is_better", True)
        names = spec.pop("variants", None)
        subset = [row for row in table if all(row.get(k) == v for k, v in where.items())]
        if not isinstance(metric, str) or not any(metric in row for row in subset):
            raise ValueError(f"comparisons[{c}]: metric {metric!r} is not a column of the (filtered) table")
        if any(by not in row or "seed" not in row for row in subset):
            raise ValueError(f"comparisons[{c}]: every row needs the columns {by!r} and 'seed'")
        groups: dict[str, list[dict[str, Any]]] = {}
        for row in subset:
            groups.setdefault(row[by], []).append(row)
        names = list(groups) if names is None else list(names)
        missing = [n for n in names if n not in groups]
        if missing or (baseline is not None and baseline not in groups):
            raise ValueError(f"comparisons[{c}]: {missing or [baseline]} not among the {by} values {list(groups)}")
        if baseline is not None and baseline not in names:
            names.insert(0, baseline)
        base_values = {r["seed"]: r.get(metric) for r in groups.get(baseline, [])}
        for name in names:
            row = {**spec, **_describe(name, groups[name], by, metric)}
            if baseline is None:
                row["verdict"] = ""
            elif name == baseline:
                row.update(dict.fromkeys(_COMPARISON_KEYS), p_holm=None, verdict="baseline")
            else:
                row.update(paired_comparison(base_values, {r["seed"]: r.get(metric) for r in groups[name]},
                                             confidence=confidence))  # fmt: skip
                key = (repr(sorted(where.items())), by, baseline, name, metric)
                row.update(_baseline=baseline, _lower=lower_is_better, _key=key)
                tested.setdefault(key, row)
            rows.append(row)
    keys = list(tested)
    adjusted = dict(zip(keys, holm([tested[k]["p"] for k in keys])))
    for row in rows:
        if "_key" in row:
            row["p_holm"] = adjusted[row.pop("_key")]
            row["verdict"] = _verdict(row, row.pop("_baseline"), row.pop("_lower"), alpha)
        if row["n_diverged"]:
            row["verdict"] = f"{row['verdict']}; {row['n_diverged']} of {row['n_runs']} runs diverged".lstrip("; ")
    return rows


def _describe(name: str, runs: list[Mapping[str, Any]], by: str, metric: str) -> dict[str, Any]:
    values = [float(v) for v in (r.get(metric) for r in runs)
              if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]  # fmt: skip
    n = len(values)
    return {
        by: name,
        "metric": metric,
        "n": n,
        "n_diverged": sum(r.get("status") == "diverged" for r in runs),
        "n_runs": len(runs),
        "mean": statistics.fmean(values) if n else None,
        "std": statistics.stdev(values) if n >= 2 else None,
        "min": min(values) if n else None,
        "max": max(values) if n else None,
    }


def _verdict(row: Mapping[str, Any], baseline: str, lower_is_better: bool, alpha: float) -> str:
    if row["n_pairs"] == 0:
        return "no paired seeds"
    if row["n_pairs"] < 2:
        return "cannot tell: one seed"
    if row["p"] is None and row["diff"] == 0:
        return NO_DIFFERENCE
    if row["p_holm"] is None or row["p_holm"] >= alpha:
        return WITHIN_NOISE
    lower = row["diff"] < 0
    quality = "better" if lower == lower_is_better else "worse"
    return f"{significant_words(alpha)}: {'lower' if lower else 'higher'} ({quality}) than {baseline}"


def describe_comparison(row: Mapping[str, Any]) -> str:
    """One line from a :func:`compare_groups` row, with the numbers it has, e.g. "−0.44 % (95 % CI −1.90 …
    +1.02 %; paired t(4) = −0.62, p = 0.57, Holm p = 1; Welch p = 0.6): within noise"."""
    parts = []
    if row.get("rel_ci_low_pct") is not None:
        parts.append(f"95 % CI {row['rel_ci_low_pct']:+.2f} … {row['rel_ci_high_pct']:+.2f} %")
    if row.get("p") is not None:
        t = f"{row['t']:.2f}" if row.get("t") is not None else "undefined (same difference in every seed)"
        parts.append(f"paired t({row['df']}) = {t}, p = {row['p']:.2g}, Holm p = {row['p_holm']:.2g}")
    if row.get("welch_p") is not None:
        parts.append(f"Welch p = {row['welch_p']:.2g}")
    change = f"{row['rel_change_pct']:+.2f} %" if row.get("rel_change_pct") is not None else "n/a"
    return f"{change} ({'; '.join(parts)}): {row['verdict']}" if parts else f"{change}: {row['verdict']}"


__all__ = ["ALPHA", "CONFIDENCE", "NO_DIFFERENCE", "NO_EQUIVALENCE_TEST", "WITHIN_NOISE", "claim_verdict",
           "compare_groups", "describe_comparison", "equivalence_test", "holm", "paired_comparison",
           "significant_words"]
