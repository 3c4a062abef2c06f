"""Rank-aware spectral bounds on attention logits for FP8 scaling (arXiv 2602.18851).

Emadi, "Rank-Aware Spectral Bounds on Attention Logits for Stable Low-Precision Training" (Feb 2026).
Only the paper's abstract and problem statement are public. The formulas below marked **spanviz
reconstruction** were rebuilt by us so that they reproduce every stated fact; they are not quoted from the
paper. See ``docs/fp8_bounds.md`` for the derivation sketch.

Notation (field terms): a head's logits are S_ij = x_iᵀ M x_j / √d_head with M = W^Q_h W^K_hᵀ
(d×d, rank r <= d_head); σ = ‖M‖₂ (spectral norm); ρ = max‖x‖; δ = allowed failure probability;
γ > 1 = typicality of keys; K = number of logits (query/key pairs) one scale covers; N = number of keys.
FP8 formats: "e4m3" (``torch.float8_e4m3fn``, max 448) and "e5m2" (``torch.float8_e5m2``, max 57344).

Contents:

* spectral norms without forming d×d products: :func:`spectral_norms_exact` (thin-QR core via CholeskyQR
  or Householder QR, exact) and :class:`PowerIteration` (implicit, warm-started, *under*-estimates σ);
  both accept grouped-query weights;
* bounds: :func:`worst_case_bound`, :func:`solve_gamma`, :func:`alpha_agnostic`, :func:`alpha_star`,
  :func:`logit_bounds`;
* folding of LayerNorm gain/bias and q/k biases so that ρ² = d (+1) exactly: :func:`fold_qk`,
  :func:`normalized_input`;
* scales: :func:`geometry_scale`, :func:`strategy_alpha`, :class:`CalibratedAlpha`, and Transformer
  Engine-style :class:`DelayedScaling`;
* FP8 mechanics: :func:`fake_quantize`, :func:`count_overflow`, :func:`utilisation`;
* the training probe :class:`FP8Probe` and the rank-knob demo :func:`random_bounds_vs_rank`.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

logger = logging.getLogger(__name__)

FORMATS: dict[str, torch.dtype] = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
FP8_MAX: dict[str, float] = {name: float(torch.finfo(dtype).max) for name, dtype in FORMATS.items()}
CAST_OVERFLOW: dict[str, tuple[float, bool]] = {"e4m3": (464.0, False), "e5m2": (61440.0, True)}
"""Per format (threshold, tie overflows): where a non-saturating cast with round-to-nearest-even stops rounding
to ±fmax. The threshold is the midpoint between fmax and the next step of the format's grid (E4M3: 448 and 480,
whose code is NaN; E5M2: 57344 and 65536 = inf). At the midpoint itself the tie goes to the even mantissa:
448 (0b110) for E4M3, inf for E5M2 — so E4M3 overflows for |x| > 464, E5M2 for |x| >= 61440 (torch's E5M2
cast agrees, tested). Source: OCP 8-bit floating point specification (OFP8), rounding and overflow rules."""
OVERFLOW_COUNTS = ("cast", "range")
ALPHA_CHOICES = ("theory", "agnostic", "deterministic", "calibrated")
STRATEGIES = ("delayed",) + ALPHA_CHOICES
DELAYED_ALGOS = ("max", "most_recent")
EXACT_METHODS = ("auto", "cholesky", "householder")


# ------------------------------------------------------------------------------------------ validation
def _check_fmt(fmt: Any) -> str:
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {tuple(FORMATS)}, got {fmt!r}")
    return fmt


def _check_delta(delta: Any) -> float:
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0.0 < delta < 1.0:
        raise ValueError(f"delta (δ) must be a number in (0, 1), got {delta!r}")
    return float(delta)


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be an integer {allowed}, got {value!r}")
    return value


def _check_number(name: str, value: Any, *, low: float, low_open: bool = False, high: float | None = None) -> float:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and (high is None or value <= high)
    if not ok:
        bracket = "(" if low_open else "["
        allowed = f"a finite number in {bracket}{low}, {'inf)' if high is None else f'{high}]'}"
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return float(value)


def _check_margin(margin: Any) -> float:
    return _check_number("margin", margin, low=0.0)


def _as_float(x: Tensor | float) -> float:
    return float(x.item()) if isinstance(x, Tensor) else float(x)


# ------------------------------------------------------------------------------------- spectral norms
def _check_qk_shapes(W_Q: Tensor, W_K: Tensor) -> tuple[int, int, int, int]:
    if not isinstance(W_Q, Tensor) or W_Q.dim() != 3:
        raise ValueError(f"W_Q must be a tensor (n_head, d_model, d_head), got shape {getattr(W_Q, 'shape', W_Q)}")
    if not isinstance(W_K, Tensor) or W_K.dim() != 3:
        raise ValueError(f"W_K must be a tensor (n_kv_head, d_model, d_head), got shape {getattr(W_K, 'shape', W_K)}")
    H, d, dh = W_Q.shape
    H_kv = W_K.shape[0]
    if W_K.shape[1:] != (d, dh):
        raise ValueError(
            f"W_K must have shape (n_kv_head, {d}, {dh}) to match W_Q {tuple(W_Q.shape)}, got {tuple(W_K.shape)}"
        )
    if H_kv < 1 or H % H_kv:
        raise ValueError(f"n_kv_head (W_K.shape[0]) must divide n_head={H}, got {H_kv}")
    return H, H_kv, d, dh


def _compute_dtype(t: Tensor) -> Tensor:
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


def spectral_norms_exact(W_Q: Tensor, W_K: Tensor, method: str = "auto") -> Tensor:
    """Exact σ_h = ‖W^Q_h W^K_{g(h)}ᵀ‖₂ per query head, without forming the d×d products.

    Thin-QR core: with W^K_g = Q_B R_B (Q_B has orthonormal columns), W^Q_h W^K_gᵀ = (W^Q_h R_Bᵀ) Q_Bᵀ,
    so σ_h = σ_max(W^Q_h R_Bᵀ), a d×d_head matrix. Two ways to get R_B:

    * ``"cholesky"`` (CholeskyQR): R_B = Lᵀ with W^K_gᵀ W^K_g = L Lᵀ, a d_head×d_head Cholesky factor; then
      X_h = W^Q_h L and σ_h² = λ_max(X_hᵀ X_h) (d_head×d_head symmetric eigenvalues). Cheap, and accurate
      for σ_h (backward-stable Cholesky: the error in σ_h² is a few ulps of ‖W^Q_h‖²‖W^K_g‖²). Fails when
      the key Gram is not numerically positive definite (rank-deficient W^K, e.g. d_model < d_head).
    * ``"householder"``: R from Householder QR of both sides (``torch.linalg.qr``), then the d_head×d_head
      SVD of R_A R_Bᵀ. Works for any rank; slower on CPU (LAPACK on tiny matrices).
    * ``"auto"`` (default): Cholesky, and Householder when a key Gram is not positive definite.

    Grouped-query attention: query head h uses KV head g(h) = h // (n_head / n_kv_head) (consecutive
    query heads share a KV head). Each KV head is factored once; key weights are never copied.

    Args:
        W_Q: (n_head, d_model, d_head), q_h = x @ W_Q[h].
        W_K: (n_kv_head, d_model, d_head), n_kv_head divides n_head (n_kv_head = n_head: plain MHA).
        method: "auto", "cholesky" or "householder".
    Returns:
        (n_head,) spectral norms in W_Q's (floating, at least fp32) dtype, same device.
    Raises:
        ValueError: on wrong ranks/shapes, when n_kv_head does not divide n_head, on an unknown method, or
            with method="cholesky" when a key Gram is not positive definite.
    Source: linear algebra (arXiv 2602.18851 names the QR-core method; CholeskyQR is spanviz's choice).
    """
    H, H_kv, _, _ = _check_qk_shapes(W_Q, W_K)
    if method not in EXACT_METHODS:
        raise ValueError(f"method must be one of {EXACT_METHODS}, got {method!r}")
    A = _compute_dtype(W_Q)
    B = W_K.to(A.dtype)
    if method != "householder":
        sigma = _qr_core_norms_cholesky(A, B)
        if sigma is not None:
            return sigma
        if method == "cholesky":
            raise ValueError(
                "method='cholesky' needs positive definite key Grams W_Kᵀ W_K (full-rank W_K); "
                "use method='auto' or 'householder'"
            )
    return _qr_core_norms_householder(A, B)


def _qr_core_norms_cholesky(A: Tensor, B: Tensor) -> Tensor | None:
    """σ_h = σ_max(A_h L_g) with B_gᵀ B_g = L_g L_gᵀ; None when some Cholesky fails. Shapes as above."""
    H, d, dh = A.shape
    H_kv = B.shape[0]
    L, info = torch.linalg.cholesky_ex(B.mT @ B)  # (H_kv, d_head, d_head), once per KV head
    if bool(info.any()):
        return None
    X = A.reshape(H_kv, H // H_kv, d, dh) @ L.unsqueeze(1)  # (H_kv, G, d, d_head); L broadcast, not copied
    lam_max = torch.linalg.eigvalsh(X.mT @ X)[..., -1]  # largest eigenvalue of XᵀX = σ²
    return lam_max.clamp_min(0).sqrt().reshape(H)


def _qr_core_norms_householder(A: Tensor, B: Tensor) -> Tensor:
    """σ_h = ‖R_A,h R_B,gᵀ‖₂ from Householder thin QR of both sides. Shapes as above."""
    H, _, dh = A.shape
    H_kv = B.shape[0]
    R_A = torch.linalg.qr(A, mode="r")[1]  # (H, k, d_head), k = min(d_model, d_head)
    R_B = torch.linalg.qr(B, mode="r")[1]  # (H_kv, k, d_head): once per KV head
    k = R_A.shape[-2]
    # Stack the G query heads of a group along rows: one bmm per KV head, no broadcast copies.
    core = R_A.reshape(H_kv, (H // H_kv) * k, dh) @ R_B.mT  # (H_kv, G·k, k)
    return torch.linalg.matrix_norm(core.reshape(H, k, k), ord=2)


class PowerIteration:
    """Implicit power iteration for σ_h = ‖W^Q_h W^K_{g(h)}ᵀ‖₂, batched over heads, warm-started.

    One iteration: u ← A(Bᵀv)/‖·‖, w ← B(Aᵀu), σ̂ = ‖w‖, v ← w/σ̂ with A = W^Q_h, B = W^K_{g(h)}
    (4·d_model·d_head multiply-adds per head). The state ``v`` (n_head, d_model) is kept between calls,
    like ``torch.nn.utils.spectral_norm``, so when the weights move little (one optimizer step) a single
    iteration per call tracks σ closely.

    **σ̂ under-estimates σ**: σ̂ = ‖Mᵀu‖ with ‖u‖ = 1 is always <= σ. From a random start one iteration
    gives ≈ 0.8σ on Gaussian weights (d_model 1600, d_head 64), five ≈ 0.93σ; warm-started on slowly
    changing weights it converges. Inflate it, or validate it with :func:`spectral_norms_exact`, before
    using it in a scale that must be safe.

    Args:
        n_iter: iterations per call, >= 1.
        seed: seed for the random initial v (deterministic).
    Call:
        ``pi(W_Q, W_K) -> (n_head,)`` estimates; W_Q (n_head, d_model, d_head), W_K (n_kv_head, d_model,
        d_head) as in :func:`spectral_norms_exact` (grouped-query: no copies of key weights).
    Raises:
        ValueError: bad n_iter or shapes.
    Source: standard power iteration; warm start as in arXiv 2602.18851 / torch spectral_norm.
    """

    def __init__(self, n_iter: int = 1, seed: int = 0) -> None:
        self.n_iter = _check_int("n_iter", n_iter, 1)
        self.seed = _check_int("seed", seed, 0)
        self.v: Tensor | None = None  # (n_head, d_model), unit rows
        self.calls = 0

    def reset(self) -> None:
        """Forget the warm-start vector (next call starts from a random v)."""
        self.v, self.calls = None, 0

    @torch.no_grad()
    def __call__(self, W_Q: Tensor, W_K: Tensor) -> Tensor:
        H, H_kv, d, dh = _check_qk_shapes(W_Q, W_K)
        G = H // H_kv
        A = _compute_dtype(W_Q.detach())
        B = W_K.detach().to(A.dtype)
        v = self.v
        if v is None or v.shape != (H, d) or v.device != A.device or v.dtype != A.dtype:
            gen = torch.Generator().manual_seed(self.seed)
            v = torch.randn(H, d, generator=gen, dtype=torch.float64).to(device=A.device, dtype=A.dtype)
            v = v / v.norm(dim=-1, keepdim=True)
        tiny = torch.finfo(A.dtype).tiny
        for _ in range(self.n_iter):
            t = (v.view(H_kv, G, d) @ B).view(H, dh, 1)  # Bᵀv per head: (H, d_head, 1)
            u = (A @ t).squeeze(-1)  # (H, d_model) = M v
            u = u / u.norm(dim=-1, keepdim=True).clamp_min(tiny)
            s = (u.unsqueeze(1) @ A).view(H_kv, G, dh)  # Aᵀu per head
            w = (s @ B.transpose(-1, -2)).view(H, d)  # Mᵀu
            sigma = w.norm(dim=-1)
            v = w / sigma.clamp_min(tiny).unsqueeze(-1)
        self.v = v
        self.calls += 1
        return sigma


# --------------------------------------------------------------------------------------------- bounds
def worst_case_bound(sigma: Tensor | float, d_head: int, rho2: float) -> Tensor | float:
    """Deterministic bound B_wc = ρ² σ / √d_head on |S_ij| (always safe).

    Args:
        sigma: σ = ‖W^Q W^Kᵀ‖₂ (float or tensor, elementwise).
        d_head: >= 1.
        rho2: ρ² = max ‖x‖², > 0 (d_model for LayerNorm without gain; d_model + 1 with folded biases).
    Returns: same type as ``sigma``, in logit units.
    Raises: ValueError for d_head < 1 or rho2 <= 0.
    Source: Cauchy–Schwarz (arXiv 2602.18851, problem statement).
    """
    _check_int("d_head", d_head, 1)
    rho2 = _check_number("rho2", rho2, low=0.0, low_open=True)
    return sigma * (rho2 / math.sqrt(d_head))


def solve_gamma(r: int, n_keys: int, delta: float, tol: float = 1e-12) -> float:
    """Typicality γ > 1 solving (r/2)(γ − 1 − ln γ) = ln(2N/δ) by bisection.

    Meaning: for a key uniform on a sphere, the fraction of its energy in an r-dimensional subspace
    exceeds γ·r/d with probability <= exp(−(r/2)(γ − 1 − ln γ)) (χ² Chernoff bound); a union over N keys
    with budget δ/2 gives the equation. Smaller r or more keys ⇒ larger γ.

    Args:
        r: rank of M, >= 1.
        n_keys: N >= 1, keys the statement covers.
        delta: δ in (0, 1).
        tol: absolute tolerance on γ, > 0.
    Returns: γ (float, > 1).
    Raises: ValueError for r < 1, n_keys < 1, δ ∉ (0, 1), tol <= 0.
    Source: **spanviz reconstruction** of arXiv 2602.18851 (the paper states the idea, not the formula).
    """
    _check_int("r", r, 1)
    _check_int("n_keys", n_keys, 1)
    delta = _check_delta(delta)
    tol = _check_number("tol", tol, low=0.0, low_open=True)
    target = 2.0 * math.log(2.0 * n_keys / delta) / r  # γ − 1 − ln γ = target > 0

    def f(g: float) -> float:
        return g - 1.0 - math.log(g)

    lo, hi = 1.0, 2.0
    while f(hi) < target:  # f grows without bound on (1, ∞)
        lo, hi = hi, 2.0 * hi
    while hi - lo > tol * max(1.0, lo):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return 0.5 * (lo + hi)


def alpha_agnostic(d: int, n_pairs: int, delta: float) -> float:
    """Rank-agnostic α = √(2 ln(4K/δ) / d): P(max |S| > α·B_wc) <= δ/2 for isotropic x on the √d sphere.

    From the tail P(|S_ij| > α B_wc) <= 2 exp(−d α²/2) and a union over K pairs with budget δ/2.

    Args: d: input dimension (d_model, +1 when augmented), >= 1; n_pairs: K >= 1; delta: δ in (0, 1).
    Returns: α (dimensionless; not capped — values >= 1 mean "no better than the worst case").
    Raises: ValueError on bad arguments.
    Source: **spanviz reconstruction** of arXiv 2602.18851.
    """
    _check_int("d", d, 1)
    _check_int("n_pairs", n_pairs, 1)
    delta = _check_delta(delta)
    return math.sqrt(2.0 * math.log(4.0 * n_pairs / delta) / d)


def alpha_star(d: int, r: int, n_pairs: int, n_keys: int, delta: float, gamma: float | None = None) -> float:
    """Rank-aware α*(δ) = √(2 γ r ln(4K/δ)) / d, with γ from :func:`solve_gamma` unless given.

    From the tail P(|S_ij| > α B_wc) <= 2 exp(−d² α² / (2 γ r)) (keys typical: energy in M's r-dim row
    space <= γ r/d of the total, probability >= 1 − δ/2) and a union over K pairs with budget δ/2.
    An energy fraction cannot exceed 1, so γ r is capped at d: when γ r >= d (small d, few keys per
    dimension) α* equals :func:`alpha_agnostic` and the rank gives no gain.

    Assumes query and key independent and isotropic. A self-pair S_ii = x_iᵀ M x_i/√d_head concentrates
    at tr(M)/√d_head instead, which can exceed this bound when M has a large positive trace (tested).

    Args:
        d: input dimension, >= 1; r: rank of M, in [1, d]; n_pairs: K >= 1; n_keys: N >= 1;
        delta: δ in (0, 1); gamma: optional γ > 1 (skips the solve).
    Returns: α* (dimensionless, not capped).
    Raises: ValueError on bad arguments (r > d, δ ∉ (0, 1), γ <= 1, ...).
    Source: **spanviz reconstruction** of arXiv 2602.18851.
    """
    _check_int("d", d, 1)
    _check_int("r", r, 1, d)
    _check_int("n_pairs", n_pairs, 1)
    delta = _check_delta(delta)
    if gamma is None:
        gamma = solve_gamma(r, n_keys, delta)
    else:
        gamma = _check_number("gamma", gamma, low=1.0, low_open=True)
    energy = min(gamma * r, float(d))  # a key's energy fraction in the row space is at most 1
    return math.sqrt(2.0 * energy * math.log(4.0 * n_pairs / delta)) / d


def logit_bounds(
    sigma: float | Tensor,
    d: int,
    d_head: int,
    *,
    r: int | None = None,
    n_pairs: int,
    n_keys: int,
    delta: float = 1e-3,
    rho2: float | None = None,
) -> dict[str, float]:
    """The three max-logit bounds for one head (or one layer, with σ = max over heads).

    * worst case: B_wc = ρ² σ / √d_head (deterministic);
    * rank-agnostic: B_agnostic = min(α_agn, 1)·B_wc — with ρ² = d, σ √(2 d ln(4K/δ)) / √d_head;
    * rank-aware: B_rank_aware = min(α*, 1)·B_wc — with ρ² = d and r = d_head, σ √(2 γ ln(4K/δ)).

    Tail bounds above the deterministic one are vacuous, hence the cap at B_wc. Uncapped and with
    γ r < d, the magnitude ratio B_agnostic / B_rank_aware = √(d / (γ r)) ("8–28× tighter concentration"
    in the paper is the exponent ratio d/(γ d_head); the logit bounds get √ of it, ≈ 2.8–5.3× smaller).
    With γ r >= d the two tail bounds coincide (see :func:`alpha_star`).

    Args:
        sigma: σ (float or one-element tensor).
        d: input dimension (d_model, +1 when biases are folded), >= 1.
        d_head: >= 1.
        r: rank of M, 1 <= r <= d_head (default d_head).
        n_pairs: K, logits covered (e.g. n² for one head over n tokens); n_keys: N, keys covered.
        delta: δ in (0, 1).
        rho2: ρ² (default d: LayerNorm without gain).
    Returns:
        dict with ``worst_case``, ``agnostic``, ``rank_aware`` (logit units), ``alpha_agnostic``,
        ``alpha_star`` (uncapped), ``gamma``, ``sigma``, ``rho2``.
    Raises:
        ValueError on bad arguments (r > d_head or < 1, δ ∉ (0, 1), ...).
    Source: worst case exact; the two tail bounds are a **spanviz reconstruction** of arXiv 2602.18851.
    """
    _check_int("d_head", d_head, 1)
    r = d_head if r is None else _check_int("r", r, 1, d_head)
    rho2 = float(d) if rho2 is None else rho2
    sigma_f = _as_float(sigma)
    if not math.isfinite(sigma_f) or sigma_f < 0:
        raise ValueError(f"sigma must be a finite number >= 0, got {sigma_f}")
    b_wc = worst_case_bound(sigma_f, d_head, rho2)
    gamma = solve_gamma(r, n_keys, delta)
    a_agn = alpha_agnostic(d, n_pairs, delta)
    a_star = alpha_star(d, r, n_pairs, n_keys, delta, gamma=gamma)
    return {
        "sigma": sigma_f,
        "rho2": float(rho2),
        "gamma": gamma,
        "alpha_agnostic": a_agn,
        "alpha_star": a_star,
        "worst_case": b_wc,
        "agnostic": min(a_agn, 1.0) * b_wc,
        "rank_aware": min(a_star, 1.0) * b_wc,
    }


# -------------------------------------------------------------------------------------------- folding
@dataclass(frozen=True)
class FoldedQK:
    """Query/key weights of one layer with norm gain, norm bias and q/k biases folded in.

    Fields:
        W_Q, W_K: (n_head, d_in, d_head), detached. With x̃ = :func:`normalized_input`, the layer's
            pre-mask scores are S_h = x̃ W_Q[h] (x̃ W_K[h])ᵀ / √d_head exactly.
        augmented: True when a constant-1 input column carries the biases (d_in = d_model + 1).
        rank: upper bound on rank(W_Q[h] W_K[h]ᵀ): qk_rank (or d_head), +1 when augmented, <= d_head.
    """

    W_Q: Tensor
    W_K: Tensor
    augmented: bool
    rank: int

    @property
    def n_head(self) -> int:
        return self.W_Q.shape[0]

    @property
    def d_in(self) -> int:
        """Input dimension of the bilinear form (d_model, +1 when augmented)."""
        return self.W_Q.shape[1]

    @property
    def d_head(self) -> int:
        return self.W_Q.shape[2]

    @property
    def rho2(self) -> float:
        """ρ² = max ‖x̃‖² = d_in (LayerNorm output without gain has ‖x̂‖² = d_model up to eps)."""
        return float(self.d_in)


def _check_bilinear(attn: nn.Module) -> None:
    if getattr(attn, "q_norm", None) is not None or getattr(attn, "k_norm", None) is not None:
        raise ValueError(
            "qk_norm=True: the attention logits are not bilinear in the layer input, so the spectral "
            "FP8 bounds do not apply; use a model with qk_norm=False"
        )


@torch.no_grad()
def fold_qk(block: nn.Module) -> FoldedQK:
    """Fold a pre-LN block's LayerNorm (gain g, bias β) and q/k biases into per-head weights.

    q_h = (g ⊙ x̂ + β) W^Q_h + b^Q_h = [x̂, 1] · [diag(g) W^Q_h ; β W^Q_h + b^Q_h] (same for k), where
    x̂ = (x − mean)/√(var + eps) is the LayerNorm output *without* gain, ‖x̂‖² = d_model·var/(var+eps)
    <= d_model. So ρ² = d_model (no biases anywhere) or d_model + 1 (augmented) holds for every input.

    Args:
        block: a module with ``ln_1`` (``nn.LayerNorm``) and ``attn`` (:class:`spanviz.model.Attention`,
            providing ``qk_weights()``), e.g. ``model.blocks[i]``.
    Returns: :class:`FoldedQK`.
    Raises: ValueError when the attention uses qk_norm (logits not bilinear) or ``ln_1`` is not a LayerNorm.
    Source: **spanviz reconstruction** of the folding step sketched in arXiv 2602.18851.
    """
    ln, attn = block.ln_1, block.attn
    if not isinstance(ln, nn.LayerNorm):
        raise ValueError(f"block.ln_1 must be an nn.LayerNorm, got {type(ln).__name__}")
    _check_bilinear(attn)
    W_Q, b_Q, W_K, b_K = (None if t is None else t.detach() for t in attn.qk_weights())
    d = W_Q.shape[1]
    gain = ln.weight.detach() if ln.weight is not None else torch.ones(d, dtype=W_Q.dtype, device=W_Q.device)
    beta = ln.bias.detach() if ln.bias is not None else None
    augmented = beta is not None or b_Q is not None or b_K is not None

    def fold(W: Tensor, b: Tensor | None) -> Tensor:
        if not augmented:
            return gain.view(1, d, 1) * W  # diag(g) W, (H, d, d_head)
        out = W.new_empty(W.shape[0], d + 1, W.shape[2])  # (H, d + 1, d_head): [diag(g) W ; β W + b]
        torch.mul(gain.view(1, d, 1), W, out=out[:, :d])
        if beta is None:
            out[:, d] = b  # augmented by a q/k bias alone
        else:
            out[:, d] = beta @ W if b is None else beta @ W + b  # (d,) @ (H, d, d_head) -> (H, d_head)
        return out

    d_head = W_Q.shape[2]
    rank = getattr(attn.W_Q, "rank", None) or d_head
    rank = min(d_head, rank + 1) if augmented else rank
    return FoldedQK(fold(W_Q, b_Q), fold(W_K, b_K), augmented, rank)


def normalized_input(x: Tensor, ln: nn.LayerNorm, augmented: bool) -> Tensor:
    """LayerNorm output *without* gain and bias, x̂ = (x − mean)/√(var + eps), optionally augmented.

    Args:
        x: (..., d_model) residual stream entering the block.
        ln: the block's ``ln_1`` (only ``eps`` and ``normalized_shape`` are used).
        augmented: append a constant-1 column (matches :attr:`FoldedQK.augmented`).
    Returns: (..., d_model) or (..., d_model + 1); ‖x̂‖² <= d_model (equality up to eps).
    """
    x_hat = torch.nn.functional.layer_norm(x, ln.normalized_shape, eps=ln.eps)
    if augmented:
        x_hat = torch.cat([x_hat, torch.ones_like(x_hat[..., :1])], dim=-1)
    return x_hat


def layer_sigma(block: nn.Module) -> tuple[float, FoldedQK]:
    """σ^(ℓ) = max over heads of the exact spectral norm of the folded W̃^Q_h W̃^K_hᵀ.

    Returns (σ^(ℓ) as float, the :class:`FoldedQK` it was computed from). Raises as :func:`fold_qk`.
    """
    folded = fold_qk(block)
    return float(spectral_norms_exact(folded.W_Q, folded.W_K).max()), folded


# --------------------------------------------------------------------------------------------- scales
def geometry_scale(
    sigma: float,
    d_head: int,
    rho2: float,
    alpha: float = 1.0,
    *,
    margin: float = 0.0,
    fmt: str = "e4m3",
    power_of_two: bool = False,
) -> float:
    """Geometry-aware scale s = fmax / (2^margin · α · ρ² σ / √d_head), from the weights alone.

    Args:
        sigma: σ^(ℓ) >= 0 (max over the layer's heads).
        d_head: >= 1. rho2: ρ² > 0.
        alpha: α in (0, 1]; 1 = deterministic (never overflows), smaller = tighter, probabilistic.
        margin: >= 0, the scale is divided by 2^margin (headroom, as in Transformer Engine).
        fmt: "e4m3" (fmax 448) or "e5m2" (fmax 57344).
        power_of_two: round the scale *down* to a power of two (keeps the safety guarantee).
    Returns: s (float). If the bound is 0 (σ = 0: all logits are 0), returns 1.0 (any scale is safe).
    Raises: ValueError on bad arguments.
    Source: arXiv 2602.18851 (scale rule); α choices per :func:`strategy_alpha`.
    """
    fmax = FP8_MAX[_check_fmt(fmt)]
    alpha = _check_number("alpha", alpha, low=0.0, low_open=True, high=1.0)
    margin = _check_margin(margin)
    sigma = _check_number("sigma", _as_float(sigma), low=0.0)
    bound = alpha * worst_case_bound(sigma, d_head, rho2)
    if bound == 0.0:
        return 1.0
    scale = fmax / (2.0**margin * bound)
    if power_of_two:
        scale = 2.0 ** math.floor(math.log2(scale))
    return scale


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
        self.kappa = _check_number("kappa", kappa, low=1.0)
        self.burn_in = _check_int("burn_in", burn_in, 0)
        self.decay = _check_number("decay", decay, low=0.0, low_open=True, high=1.0)
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
        alpha_obs = _check_number("alpha_obs", _as_float(alpha_obs), low=0.0)
        self.n_updates += 1
        self.max_obs = max(self.max_obs, alpha_obs)
        if self.n_updates < self.burn_in:
            return self._alpha
        if self.n_updates == self.burn_in:
            self._alpha = self.kappa * self.max_obs
        else:
            self._alpha = max(self.kappa * alpha_obs, self.decay * self._alpha)
        self._alpha = min(1.0, max(self._alpha, torch.finfo(torch.float32).tiny))
        return self._alpha


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
        self.history_len = _check_int("history_len", history_len, 1, 2**31 - 1)
        self.margin = _check_margin(margin)
        if algo not in DELAYED_ALGOS:
            raise ValueError(f"algo must be one of {DELAYED_ALGOS}, got {algo!r}")
        self.algo = algo
        self.fmt = _check_fmt(fmt)
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
        amax = _as_float(amax)
        if amax < 0:
            raise ValueError(f"amax must be >= 0, got {amax}")
        self.history.append(amax)
        ref = self.amax_ref
        if ref is not None and math.isfinite(ref) and ref > 0:
            self.scale = FP8_MAX[self.fmt] / ref / 2.0**self.margin
        return self.scale

    def step(self, amax: float) -> float:
        """Return the scale used for the step whose amax is given (computed before it), then record it."""
        scale = self.scale
        self.update(amax)
        return scale


# ------------------------------------------------------------------------------------ FP8 mechanics
def _wide(x: Tensor) -> Tensor:
    return x.to(torch.promote_types(x.dtype, torch.float32))


def fake_quantize(x: Tensor, scale: float | Tensor, fmt: str = "e4m3") -> Tensor:
    """Round-trip through FP8 with saturation: (x·s).clamp(±fmax).to(fp8).float() / s.

    Clamping first makes the result independent of the torch version's overflow casting (see
    :func:`count_overflow`). Out-of-range values come back as ±fmax/s; NaN stays NaN.

    Args: x: any shape; scale: s > 0 (float or tensor broadcastable to x); fmt: "e4m3" or "e5m2".
    Returns: float32 tensor shaped like x.
    Raises: ValueError for an unknown format or a non-positive / non-finite scale.
    """
    fmax = FP8_MAX[_check_fmt(fmt)]
    _check_scale(scale)
    y = (_wide(x) * scale).clamp(-fmax, fmax).to(FORMATS[fmt]).float()
    return y / scale


def _check_scale(scale: float | Tensor) -> None:
    if isinstance(scale, Tensor):
        ok = bool(torch.isfinite(scale).all() and (scale > 0).all())
    else:
        ok = not isinstance(scale, bool) and isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0
    if not ok:
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")


def count_overflow(
    x: Tensor, scale: float | Tensor, fmt: str = "e4m3", mask: Tensor | None = None, *, count: str = "cast"
) -> int:
    """Number of entries of x·s that overflow FP8, counted on the scaled values **before** any cast.

    ``count="cast"`` (default): the entries a non-saturating cast (round to nearest, ties to even) turns into
    NaN (E4M3) or inf (E5M2): |x·s| > 464 for E4M3, |x·s| >= 61440 for E5M2 (:data:`CAST_OVERFLOW`). Values in
    (fmax, threshold] round *down* to ±fmax and are not overflows. ``count="range"``: every entry with
    |x·s| > fmax, i.e. outside the representable range before rounding (what a saturating cast clips).

    Why before the cast: casting semantics differ — PyTorch >= 2.12 saturates E4M3 overflow to ±448 (even inf),
    older builds and ml_dtypes give NaN, E5M2 overflow gives inf. Counting on the scaled values gives the
    same number everywhere. NaN entries are not counted.

    Args: x: any shape; scale: s > 0; fmt: "e4m3" or "e5m2"; mask: optional bool tensor broadcastable to
        x, True where entries count (e.g. allowed attention pairs); count: "cast" or "range".
    Returns: int.
    Raises: ValueError for an unknown format or count, or a bad scale.
    """
    fmax = FP8_MAX[_check_fmt(fmt)]
    _check_scale(scale)
    if count not in OVERFLOW_COUNTS:
        raise ValueError(f"count must be one of {OVERFLOW_COUNTS}, got {count!r}")
    scaled = (_wide(x) * scale).abs()
    if count == "range":
        over = scaled > fmax
    else:
        threshold, tie_overflows = CAST_OVERFLOW[fmt]
        over = scaled >= threshold if tie_overflows else scaled > threshold
    if mask is not None:
        over = over & mask
    return int(over.sum())


def utilisation(amax: float | Tensor, scale: float | Tensor, fmt: str = "e4m3") -> float:
    """amax·s / fmax: fraction of the FP8 range the largest value uses (> 1 means overflow).

    Low utilisation wastes precision (values land among the subnormals); 1 is ideal.
    """
    return _as_float(amax) * _as_float(scale) / FP8_MAX[_check_fmt(fmt)]


# ---------------------------------------------------------------------------------------- the probe
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
    only every ``every``-th step), "theory" (α*(δ)), "agnostic", "deterministic" (α = 1), "calibrated"
    (:class:`CalibratedAlpha`).

    Keys (all prefixed ``fp8/``; ℓ = layer index): ``L{ℓ}/max_abs_logit``, ``L{ℓ}/sigma``, ``L{ℓ}/gamma``,
    ``L{ℓ}/bound_worst_case``, ``L{ℓ}/bound_agnostic``, ``L{ℓ}/bound_rank_aware``,
    ``L{ℓ}/scale/{strategy}``, ``L{ℓ}/overflow/{strategy}``, ``L{ℓ}/utilisation/{strategy}``, and
    ``overflow/{strategy}`` (sum over layers). Values are Python floats / ints.

    Args:
        every: probe period in steps, >= 1. delta: δ in (0, 1). margin: >= 0 (all strategies).
        strategies: subset of ("delayed", "theory", "agnostic", "deterministic", "calibrated").
        fmt: "e4m3" or "e5m2". power_of_two: round geometry-aware scales down to powers of two.
        history_len, algo: for "delayed". kappa, burn_in, decay: for "calibrated".
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
    ) -> None:
        self.every = _check_int("every", every, 1)
        self.delta = _check_delta(delta)
        self.margin = _check_margin(margin)
        strategies = tuple(strategies) if isinstance(strategies, (list, tuple)) else (strategies,)
        bad = [s for s in strategies if not isinstance(s, str) or s not in STRATEGIES]
        if bad or not strategies:
            raise ValueError(f"strategies must be a non-empty subset of {STRATEGIES}, got {strategies!r}")
        self.strategies = strategies
        self.fmt = _check_fmt(fmt)
        self.power_of_two = bool(power_of_two)
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
        }  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state: per layer the delayed-scaling history and scale, and the calibration state."""
        return {
            "delayed": [{"history": list(ds.history), "scale": ds.scale} for ds in self.delayed],
            "calibrated": [
                {"n_updates": c.n_updates, "max_obs": c.max_obs, "alpha": c.alpha} for c in self.calibrated
            ],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (e.g. when a run resumes from a checkpoint)."""
        delayed, calibrated = state.get("delayed", []), state.get("calibrated", [])
        if len(delayed) != len(calibrated):
            raise ValueError(f"state has {len(delayed)} delayed and {len(calibrated)} calibrated layers; must match")
        self._state(len(delayed))
        for ds, st in zip(self.delayed, delayed):
            ds.history.clear()
            ds.history.extend(float(a) for a in st["history"])
            ds.scale = float(st["scale"])
        for cal, st in zip(self.calibrated, calibrated):
            cal.n_updates, cal.max_obs, cal._alpha = int(st["n_updates"]), float(st["max_obs"]), float(st["alpha"])

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
            _check_bilinear(block.attn)
        was_training = model.training
        model.eval()
        try:
            _, cache = model.run_with_cache(x, names=lambda n: n.endswith("hook_attn_scores"))
        finally:
            model.train(was_training)
        self._state(len(model.blocks))
        B, T = x.shape
        out: dict[str, float | int] = {f"overflow/{s}": 0 for s in self.strategies}
        for i, block in enumerate(model.blocks):
            row = self._layer(i, block, cache[f"blocks.{i}.attn.hook_attn_scores"], B, T)
            for key, value in row.items():
                out[f"L{i}/{key}"] = value
            for s in self.strategies:
                out[f"overflow/{s}"] += row[f"overflow/{s}"]
        return {f"fp8/{k}": v for k, v in out.items()}

    def _layer(self, i: int, block: nn.Module, scores: Tensor, B: int, T: int) -> dict[str, float | int]:
        sigma, folded = layer_sigma(block)
        allowed = block.attn.allowed(T, scores.device)  # (H, T, T)
        logits = scores[:, allowed].float()  # (B, n_allowed)
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
                scale = self.delayed[i].step(amax)
            else:
                if s == "calibrated":
                    alpha = self.calibrated[i].alpha
                else:
                    alpha = strategy_alpha(s, folded.d_in, folded.rank, n_pairs, n_keys, self.delta)
                scale = geometry_scale(
                    sigma, folded.d_head, folded.rho2, alpha, margin=self.margin, fmt=self.fmt,
                    power_of_two=self.power_of_two,
                )  # fmt: skip
                if s == "calibrated" and bounds["worst_case"] > 0:
                    self.calibrated[i].update(amax / bounds["worst_case"])
            row[f"scale/{s}"] = scale
            row[f"overflow/{s}"] = count_overflow(logits, scale, self.fmt)
            row[f"utilisation/{s}"] = utilisation(amax, scale, self.fmt)
        return row


# ------------------------------------------------------------------------------------- the rank knob
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
    _check_int("d_model", d_model, 1)
    _check_int("d_head", d_head, 1, d_model)
    _check_int("n_tokens", n_tokens, 1)
    _check_int("seed", seed, 0)
    delta = _check_delta(delta)
    ranks = list(ranks)
    for r in ranks:
        _check_int("r (in ranks)", r, 1, d_head)
    gen = torch.Generator().manual_seed(seed)
    W_Q = torch.randn(d_model, d_head, generator=gen) / math.sqrt(d_model)
    W_K = torch.randn(d_model, d_head, generator=gen) / math.sqrt(d_model)
    X = torch.randn(n_tokens, d_model, generator=gen)
    X = X * (math.sqrt(d_model) / X.norm(dim=-1, keepdim=True))
    U, S, Vh = torch.linalg.svd(W_Q, full_matrices=False)  # W^Q_r = U[:, :r] diag(S[:r]) Vh[:r]
    R_K = torch.linalg.qr(W_K, mode="r")[1]  # W_K = Q_K R_K
    core = (S.unsqueeze(1) * Vh) @ R_K.T  # (d_head, d_head); σ(W^Q_r W_Kᵀ) = σ(core[:r]) (QR-core method)
    K_proj = X @ W_K  # (n, d_head)
    XU = X @ U  # (n, d_head): queries in W^Q's left singular basis
    rows = []
    for r in ranks:
        sigma = float(torch.linalg.matrix_norm(core[:r], ord=2))
        q = (XU[:, :r] * S[:r]) @ Vh[:r]  # = X @ W^Q_r
        observed = float((q @ K_proj.T).abs().max()) / math.sqrt(d_head)
        b = logit_bounds(sigma, d_model, d_head, r=r, n_pairs=n_tokens**2, n_keys=n_tokens, delta=delta)
        rows.append(
            {
                "r": r,
                "sigma": sigma,
                "gamma": b["gamma"],
                "worst_case": b["worst_case"],
                "agnostic": b["agnostic"],
                "rank_aware": b["rank_aware"],
                "observed_max": observed,
                "sqrt_r_over_d": math.sqrt(r / d_model),
            }
        )
    return rows
