"""The technique: spectral norms of W^Q W^Kᵀ, rank-aware bounds on the largest logit, and the FP8 scale.

Emadi, "Rank-Aware Spectral Bounds on Attention Logits for Stable Low-Precision Training" (arXiv 2602.18851):
only the abstract and problem statement are public; formulas marked **spanviz reconstruction** are ours, rebuilt
to reproduce every stated fact (derivation sketch: ``docs/fp8_bounds.md``). A head's logits are
S_ij = x_iᵀ M x_j / √d_head with M = W^Q_h W^K_hᵀ (d×d, rank r <= d_head); FP8 E4M3 holds only |s·S| <= 448.
Delayed scaling picks the scale s from *past* amaxes, so a sudden change of the weights (checkpoint load,
learning-rate spike) overflows. Here s comes from the *weights alone*:

1. σ = ‖W^Q W^Kᵀ‖₂ without forming the d×d product: with W^K = Q_B R_B (thin QR), σ = σ_max(W^Q R_Bᵀ), a
   d×d_head matrix; R_B from a Cholesky of the d_head×d_head key Gram.
2. Worst case (Cauchy–Schwarz): |S_ij| <= B_wc = ρ² σ / √d_head, ρ² = max ‖x‖² (= d after LayerNorm
   without gain: fold the gain and biases into the weights, :mod:`spanviz.fp8.folding`).
3. Tails (isotropic x on the √d sphere): P(|S_ij| > α B_wc) <= 2 exp(−d α²/2) rank-agnostic, and
   <= 2 exp(−d² α² / (2 γ r)) rank-aware for γ-typical keys. A union over the K logits one scale covers gives
   α(δ); the rank-aware bound is √(d/(γ r)) smaller ("8–28× tighter concentration" is the exponent ratio).
4. The scale: s = fmax / (2^margin · α · B_wc); α = 1 never overflows, α*(δ) is tighter and probabilistic.

Notation: ρ = max ‖x‖; δ allowed failure probability; γ > 1 typicality of keys; K logits (query/key pairs)
one scale covers; N keys. Formats: "e4m3" (``torch.float8_e4m3fn``, max 448), "e5m2" (``torch.float8_e5m2``,
max 57344). Each public function checks its arguments once, then computes in unchecked helpers (``_name``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from spanviz.validators import check_bool, check_choice, check_float, check_int, check_scalar, check_tensor

FORMATS: dict[str, torch.dtype] = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
FP8_MAX: dict[str, float] = {name: float(torch.finfo(dtype).max) for name, dtype in FORMATS.items()}
EXACT_METHODS = ("auto", "householder")


def check_delta(delta: object) -> float:
    """δ as a float in the open interval (0, 1). Raises: ValueError naming ``delta (δ)`` otherwise."""
    return check_float("delta (δ)", delta, 0.0, 1.0, low_open=True, high_open=True)


def check_qk(W_Q: Tensor, W_K: Tensor) -> tuple[Tensor, Tensor]:
    """Check W_Q (n_head, d_model, d_head), q_h = x @ W_Q[h], and W_K (n_kv_head, d_model, d_head); return both
    as (n_head, d_model, d_head) in fp64 if W_Q is fp64, else fp32. n_kv_head = n_head (TinyGPT) is plain
    multi-head attention; under grouped-query attention (n_kv_head divides n_head) query head h uses KV head
    h // (n_head / n_kv_head), and W_K is repeated to the query heads here (a copy, only in that case).
    Raises: ValueError on wrong ranks or shapes, when n_kv_head does not divide n_head, or for a W that is not a
        finite, non-empty floating-point tensor (integer, complex, float8, NaN/inf, meta) or not on W_Q's device.
    """
    for name, W, heads in (("W_Q", W_Q, "n_head"), ("W_K", W_K, "n_kv_head")):
        if not isinstance(W, Tensor) or W.dim() != 3:
            got = getattr(W, "shape", W)
            raise ValueError(f"{name} must be a tensor ({heads}, d_model, d_head), got shape {got}")
        # weights, read once per probe (not per training step): the finiteness pass is affordable here
        check_tensor(name, W, finite=True, device=W_Q.device)
    H, d, dh = W_Q.shape
    H_kv = W_K.shape[0]
    if W_K.shape[1:] != (d, dh):
        raise ValueError(f"W_K must have shape (n_kv_head, {d}, {dh}) to match W_Q {tuple(W_Q.shape)}, "
                         f"got {tuple(W_K.shape)}")
    if H_kv < 1 or H % H_kv:
        raise ValueError(f"n_kv_head (W_K.shape[0]) must divide n_head={H}, got {H_kv}")
    W_Q = W_Q if W_Q.dtype in (torch.float32, torch.float64) else W_Q.float()
    W_K = W_K.to(W_Q.dtype)
    # grouped-query: query head h reads KV head h // (H / H_kv)
    return W_Q, (W_K if H_kv == H else W_K.repeat_interleave(H // H_kv, dim=0))


# ------------------------------------------------------------------------------------------------ 1. spectral norms
def spectral_norms_exact(W_Q: Tensor, W_K: Tensor, method: str = "auto") -> Tensor:
    """Exact σ_h = ‖W^Q_h W^K_hᵀ‖₂ per query head, without forming the d×d products.

    Thin-QR core: with W^K_h = Q_B R_B (orthonormal Q_B), σ_h = σ_max(W^Q_h R_Bᵀ), a d×d_head matrix.
    ``"auto"`` (CholeskyQR): R_B = Lᵀ with W^K_hᵀ W^K_h = L Lᵀ, then σ_h² = λ_max(X_hᵀ X_h), X_h = W^Q_h L —
    cheap and accurate (backward-stable Cholesky: σ_h² within a few ulps of ‖W^Q_h‖²‖W^K_h‖²); where a key
    Gram is not numerically positive definite (d_model < d_head, a zero or repeated column) it falls back to
    Householder. ``"householder"``: Householder QR of both sides, then the d_head×d_head SVD of R_A R_Bᵀ; any
    rank, slower on CPU (LAPACK on tiny matrices; the benchmark compares).

    Args: W_Q, W_K: as :func:`check_qk` takes them (grouped-query accepted); method: "auto" or "householder".
    Returns: (n_head,) spectral norms in fp32 (fp64 for fp64 W_Q), on W_Q's device.
    Raises: ValueError as :func:`check_qk` raises, or on an unknown method.
    Source: linear algebra (arXiv 2602.18851 names the QR-core method; CholeskyQR is spanviz's choice).
    """
    W_Q, W_K = check_qk(W_Q, W_K)
    check_choice("method", method, EXACT_METHODS)
    sigma = _norms_cholesky(W_Q, W_K) if method == "auto" else None
    return sigma if sigma is not None else _norms_householder(W_Q, W_K)


def _norms_cholesky(W_Q: Tensor, W_K: Tensor) -> Tensor | None:
    """σ_h = σ_max(W^Q_h L_h), W^K_hᵀ W^K_h = L_h L_hᵀ; None when a Cholesky fails. W_Q, W_K: (H, d, d_head)."""
    # W^K_hᵀ W^K_h = L_h L_hᵀ (the key Gram), so R_B = L_hᵀ
    L, info = torch.linalg.cholesky_ex(W_K.mT @ W_K)  # (H, d_head, d_head)
    if bool(info.any()):
        return None
    # X_h = W^Q_h L_h
    X = W_Q @ L  # (H, d_model, d_head)
    # σ_h² = λ_max(X_hᵀ X_h), the largest eigenvalue of a d_head×d_head symmetric matrix
    lam_max = torch.linalg.eigvalsh(X.mT @ X)[..., -1]  # (H,)
    return lam_max.clamp_min(0).sqrt()


def _norms_householder(W_Q: Tensor, W_K: Tensor) -> Tensor:
    """σ_h = ‖R_A,h R_B,hᵀ‖₂ from Householder thin QR of both sides. W_Q, W_K: (H, d, d_head)."""
    # W^Q_h = Q_A R_A, W^K_h = Q_B R_B (thin QR; the orthonormal factors do not change the norm)
    R_A = torch.linalg.qr(W_Q, mode="r")[1]  # (H, k, d_head), k = min(d_model, d_head)
    R_B = torch.linalg.qr(W_K, mode="r")[1]  # (H, k, d_head)
    # σ_h = ‖R_A,h R_B,hᵀ‖₂
    return torch.linalg.matrix_norm(R_A @ R_B.mT, ord=2)  # (H,)


# --------------------------------------------------------------------------------- 2–3. bounds on the largest logit
def worst_case_bound(sigma: Tensor | float, d_head: int, rho2: float) -> Tensor | float:
    """Deterministic bound B_wc = ρ² σ / √d_head on |S_ij| (always safe).

    Args: sigma: σ = ‖W^Q W^Kᵀ‖₂ (float or tensor, elementwise). d_head: >= 1. rho2: ρ² = max ‖x‖², > 0
        (d_model for LayerNorm without gain; d_model + 1 with folded biases).
    Returns: same type as ``sigma``, in logit units.
    Raises: ValueError for d_head < 1 or rho2 <= 0. Source: Cauchy–Schwarz (arXiv 2602.18851, problem statement).
    """
    check_int("d_head", d_head, 1)
    return _worst_case(sigma, d_head, check_float("rho2", rho2, 0.0, low_open=True))


def _worst_case(sigma: Tensor | float, d_head: int, rho2: float) -> Tensor | float:
    """:func:`worst_case_bound` without the checks (its callers checked): B_wc in logit units, σ's type."""
    # B_wc = ρ² σ / √d_head
    return sigma * (rho2 / math.sqrt(d_head))


def solve_gamma(r: int, n_keys: int, delta: float, tol: float = 1e-12) -> float:
    """Typicality γ > 1 solving (r/2)(γ − 1 − ln γ) = ln(2N/δ) by bisection.

    Meaning: for a key uniform on a sphere, the fraction of its energy in an r-dimensional subspace
    exceeds γ·r/d with probability <= exp(−(r/2)(γ − 1 − ln γ)) (χ² Chernoff bound); a union over N keys
    with budget δ/2 gives the equation. Smaller r or more keys ⇒ larger γ.

    Args: r: rank of M, >= 1. n_keys: N >= 1, keys covered. delta: δ in (0, 1). tol: tolerance on γ, > 0.
    Returns: γ (float, > 1).
    Raises: ValueError for r < 1, n_keys < 1, δ ∉ (0, 1), tol <= 0.
    Source: **spanviz reconstruction** of arXiv 2602.18851 (the paper states the idea, not the formula).
    """
    check_int("r", r, 1)
    check_int("n_keys", n_keys, 1)
    delta = check_delta(delta)
    return _solve_gamma(r, n_keys, delta, check_float("tol", tol, 0.0, low_open=True))


def _solve_gamma(r: int, n_keys: int, delta: float, tol: float = 1e-12) -> float:
    """:func:`solve_gamma` without the checks: bracket the root by doubling, then bisect (f(γ) = γ − 1 − ln γ is
    increasing on (1, ∞)); stops at ``tol`` relative, or at adjacent floats."""
    # γ − 1 − ln γ = (2/r) ln(2N/δ) =: target > 0
    target = 2.0 * (math.log(2.0) + math.log(n_keys) - math.log(delta)) / r  # ln(2N/δ) without overflow
    f = lambda g: g - 1.0 - math.log(g)  # noqa: E731  (increasing on (1, ∞), without bound)
    lo, hi = 1.0, 2.0
    while f(hi) < target:
        # the root lies above hi: bracket it in [hi, 2·hi]
        lo, hi = hi, 2.0 * hi
    while hi - lo > tol * max(1.0, lo):
        # bisection: f(lo) < target <= f(hi); keep the half where f crosses target
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:  # adjacent floats: as close as float arithmetic gets
            break
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return 0.5 * (lo + hi)


def alpha_agnostic(d: int, n_pairs: int, delta: float) -> float:
    """Rank-agnostic α = √(2 ln(4K/δ) / d): P(max |S| > α·B_wc) <= δ/2 for isotropic x on the √d sphere.

    From the tail P(|S_ij| > α B_wc) <= 2 exp(−d α²/2) and a union over K pairs with budget δ/2.
    Args: d: input dimension (d_model, +1 when augmented), >= 1; n_pairs: K >= 1; delta: δ in (0, 1).
    Returns: α (dimensionless; not capped — values >= 1 mean "no better than the worst case").
    Raises: ValueError on bad arguments. Source: **spanviz reconstruction** of arXiv 2602.18851.
    """
    check_int("d", d, 1)
    check_int("n_pairs", n_pairs, 1)
    return _alpha_agnostic(d, n_pairs, check_delta(delta))


def _alpha_agnostic(d: int, n_pairs: int, delta: float) -> float:
    """:func:`alpha_agnostic` without the checks; ln(4K/δ) as a sum of logs, so a huge K does not overflow."""
    # α_agn = √(2 ln(4K/δ) / d)
    return math.sqrt(2.0 * (math.log(4.0) + math.log(n_pairs) - math.log(delta)) / d)  # ln(4n/δ), no overflow


def alpha_star(d: int, r: int, n_pairs: int, n_keys: int, delta: float, gamma: float | None = None) -> float:
    """Rank-aware α*(δ) = √(2 γ r ln(4K/δ)) / d, with γ from :func:`solve_gamma` unless given.

    From the tail P(|S_ij| > α B_wc) <= 2 exp(−d² α² / (2 γ r)) (keys typical: energy in M's r-dim row
    space <= γ r/d of the total, probability >= 1 − δ/2) and a union over K pairs with budget δ/2.
    An energy fraction is at most 1, so γ r is capped at d: when γ r >= d (small d, few keys per dimension)
    α* equals :func:`alpha_agnostic`. Assumes query and key independent and isotropic. A self-pair
    S_ii = x_iᵀ M x_i/√d_head concentrates at tr(M)/√d_head instead, which can exceed this bound when M has a
    large positive trace (tested).

    Args: d: input dimension, >= 1; r: rank of M, in [1, d]; n_pairs: K >= 1; n_keys: N >= 1;
        delta: δ in (0, 1); gamma: optional γ > 1 (skips the solve).
    Returns: α* (dimensionless, not capped).
    Raises: ValueError on bad arguments (r > d, δ ∉ (0, 1), γ <= 1, ...).
    Source: **spanviz reconstruction** of arXiv 2602.18851.
    """
    check_int("d", d, 1)
    check_int("r", r, 1, d)
    check_int("n_pairs", n_pairs, 1)
    delta = check_delta(delta)
    if gamma is None:
        gamma = _solve_gamma(r, check_int("n_keys", n_keys, 1), delta)
    else:
        gamma = check_float("gamma", gamma, 1.0, low_open=True)
    return _alpha_star(d, r, n_pairs, delta, gamma)


def _alpha_star(d: int, r: int, n_pairs: int, delta: float, gamma: float) -> float:
    """:func:`alpha_star` for a given γ, without the checks; γ r capped at d (then it equals α_agnostic)."""
    # min(γ r, d): a key's energy fraction in the row space is at most 1
    energy = min(gamma * r, float(d))
    # α* = √(2 γ r ln(4K/δ)) / d
    return math.sqrt(2.0 * energy * (math.log(4.0) + math.log(n_pairs) - math.log(delta))) / d  # ln(4n/δ)


def logit_bounds(sigma: float | Tensor, d: int, d_head: int, *, r: int | None = None, n_pairs: int, n_keys: int,
                 delta: float = 1e-3, rho2: float | None = None) -> dict[str, float]:
    """The three max-logit bounds for one head (or one layer, with σ = max over heads).

    * worst case: B_wc = ρ² σ / √d_head (deterministic);
    * rank-agnostic: B_agnostic = min(α_agn, 1)·B_wc — with ρ² = d, σ √(2 d ln(4K/δ)) / √d_head;
    * rank-aware: B_rank_aware = min(α*, 1)·B_wc — with ρ² = d and r = d_head, σ √(2 γ ln(4K/δ)).

    Tail bounds above the deterministic one are vacuous, hence the cap at B_wc. Uncapped and with γ r < d,
    B_agnostic / B_rank_aware = √(d / (γ r)) ("8–28× tighter concentration" in the paper is the exponent ratio
    d/(γ d_head): logit bounds ≈ 2.8–5.3× smaller). With γ r >= d they coincide (see :func:`alpha_star`).

    Args:
        sigma: σ >= 0 (float or one-element tensor). d: input dimension (d_model, +1 with folded biases), >= 1.
        d_head: >= 1. r: rank of M, 1 <= r <= min(d_head, d) (default d_head).
        n_pairs: K, logits covered (e.g. n² for one head over n tokens); n_keys: N, keys covered.
        delta: δ in (0, 1). rho2: ρ² > 0 (default d: LayerNorm without gain).
    Returns: dict with ``worst_case``, ``agnostic``, ``rank_aware`` (logit units), ``alpha_agnostic``,
        ``alpha_star`` (uncapped), ``gamma``, ``sigma``, ``rho2``.
    Raises: ValueError on bad arguments (r > d_head or < 1, δ ∉ (0, 1), ...).
    Source: worst case exact; the two tail bounds are a **spanviz reconstruction** of arXiv 2602.18851.
    """
    check_int("d_head", d_head, 1)
    check_int("d", d, 1)
    r = check_int("r", d_head if r is None else r, 1, min(d_head, d))
    sigma = check_scalar("sigma", sigma, 0.0)
    rho2 = check_float("rho2", float(d) if rho2 is None else rho2, 0.0, low_open=True)
    check_int("n_pairs", n_pairs, 1)
    check_int("n_keys", n_keys, 1)
    delta = check_delta(delta)
    gamma = _solve_gamma(r, n_keys, delta)
    a_agn, a_star = _alpha_agnostic(d, n_pairs, delta), _alpha_star(d, r, n_pairs, delta, gamma)
    b_wc = _worst_case(sigma, d_head, rho2)
    # B = min(α, 1) · B_wc: a tail bound above the deterministic one is vacuous
    return {"sigma": sigma, "rho2": rho2, "gamma": gamma, "alpha_agnostic": a_agn, "alpha_star": a_star,
            "worst_case": b_wc, "agnostic": min(a_agn, 1.0) * b_wc, "rank_aware": min(a_star, 1.0) * b_wc}


# ----------------------------------------------------------------------------------------------------- 4. the scale
def scale_from_bound(bound: float | Tensor, *, margin: float = 0.0, fmt: str = "e4m3",
                     power_of_two: bool = False) -> float:
    """The FP8 scale s = fmax / (2^margin · B) that maps a bound B on |S| to the format's largest value.

    Args:
        bound: B >= 0 in logit units (e.g. a value of :func:`logit_bounds`). fmt: "e4m3" (fmax 448) or "e5m2"
            (fmax 57344). margin: >= 0, the scale is divided by 2^margin (headroom, as in Transformer Engine).
        power_of_two: round the scale *down* to a power of two (keeps the safety guarantee).
    Returns: s (float). If B = 0 (all logits are 0), returns 1.0 (any scale is safe).
    Raises: ValueError on bad arguments. Source: arXiv 2602.18851 (scale rule).
    """
    fmax = FP8_MAX[check_choice("fmt", fmt, FORMATS)]
    margin = check_float("margin", margin, 0.0)
    check_bool("power_of_two", power_of_two)
    return _scale(check_scalar("bound", bound, 0.0), margin, fmax, power_of_two)


def _scale(bound: float, margin: float, fmax: float, power_of_two: bool) -> float:
    """:func:`scale_from_bound` without the checks: s = fmax / (2^margin · B), rounded down to a power of two on
    request; 1.0 for B = 0."""
    if bound == 0.0:
        return 1.0
    # log₂ s = log₂ fmax − margin − log₂ B: checked in the log domain, where neither 2^margin nor fmax / B overflows
    log2_scale = math.log2(fmax) - margin - math.log2(bound)
    if not -1022.0 <= log2_scale <= 1023.0:  # float64's normal range: s would round to 0 or inf (or lose digits)
        raise ValueError(f"the scale s = fmax / (2^margin · B) = 2^{log2_scale:.4g} is outside float64's range "
                         f"(bound B={bound!r}, margin={margin!r}, fmax={fmax:g}): no FP8 scale maps this bound")
    # s = fmax / (2^margin · B), fmax = 448 for E4M3
    scale = fmax / (2.0**margin * bound)
    if power_of_two:
        # s ← 2^⌊log₂ s⌋, the power of two just below
        scale = 2.0 ** math.floor(math.log2(scale))
    return scale


def geometry_scale(sigma: float, d_head: int, rho2: float, alpha: float = 1.0, *, margin: float = 0.0,
                   fmt: str = "e4m3", power_of_two: bool = False) -> float:
    """Geometry-aware scale s = fmax / (2^margin · α · ρ² σ / √d_head), from the weights alone.

    Args:
        sigma: σ^(ℓ) >= 0 (max over the layer's heads). d_head: >= 1. rho2: ρ² > 0.
        alpha: α in (0, 1]; 1 = deterministic (never overflows), smaller = tighter, probabilistic.
        margin, fmt, power_of_two: as :func:`scale_from_bound`.
    Returns: s (float). If the bound is 0 (σ = 0: all logits are 0), returns 1.0 (any scale is safe).
    Raises: ValueError on bad arguments. Source: arXiv 2602.18851 (scale rule); α: :mod:`spanviz.fp8.scaling`.
    """
    fmax = FP8_MAX[check_choice("fmt", fmt, FORMATS)]
    alpha = check_float("alpha", alpha, 0.0, 1.0, low_open=True)
    margin = check_float("margin", margin, 0.0)
    check_bool("power_of_two", power_of_two)
    sigma = check_scalar("sigma", sigma, 0.0)
    check_int("d_head", d_head, 1)
    rho2 = check_float("rho2", rho2, 0.0, low_open=True)
    # B = α · B_wc = α ρ² σ / √d_head
    return _scale(alpha * _worst_case(sigma, d_head, rho2), margin, fmax, power_of_two)
