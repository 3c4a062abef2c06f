"""LS-attention teaching demos: why a global head needs ever larger logits to stay local, and a toy fit that shows it.

* :func:`required_logit_gap` — the softmax margin a global head needs to put mass 1 − ε on its p most recent
  keys; it grows with the context, a local head needs none;
* :func:`toy_band_fit` — one attention head (free Q, K or a small MLP of positions) fitted to "uniform over the
  last p keys": a low-rank global head keeps inflating its max logit, a local head fits with small logits;
* :func:`head_masks` / :func:`head_labels` — every head's mask as a dense bool array and its title (notebook 02's
  mask figure);
* :func:`print_masks` — the masks of a small example as text, and a block mask (``python -m spanviz.local_global``).

Source: spanviz's reconstruction of the argument and the mechanism claimed in arXiv 2505.15548.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from spanviz.contexts import torch_threads
from spanviz.local_global.core import block_mask, dense_mask, head_mask_mod
from spanviz.validators import check_choice, check_float, check_int

log = logging.getLogger(__name__)
HEADS = ("global", "local")


def required_logit_gap(i: int | Sequence[int] | np.ndarray, p: int, eps: float, head: str = "global"):
    """Softmax margin: the logit gap a head needs to put mass >= 1 − ε on the p most recent keys.

    Query i (0-based) sees i + 1 keys; with in-band logits a and out-of-band logits b the in-band mass is
    p·e^a / (p·e^a + (i + 1 − p)·e^b), which is >= 1 − ε iff

        a − b >= log((i + 1 − p)/p) + log((1 − ε)/ε).

    The requirement grows like log i with the context; a **local** head (window p) has no out-of-band keys
    and needs no gap (returns 0). Rows with i + 1 <= p also have no out-of-band keys (0). Negative values
    (few out-of-band keys, large ε) mean the in-band logits may even sit below the others.

    Args:
        i: query position(s) >= 0 (int or array-like). p: band width >= 1. eps: out-of-band mass in (0, 1).
        head: "global" or "local".
    Returns:
        float for an int i, else a float numpy array of i's shape (nats, i.e. logit units).
    Raises:
        ValueError: i negative / not integer, p not an integer >= 1, eps outside (0, 1), unknown head.
    Source: spanviz reconstruction of the argument in arXiv 2505.15548.
    """
    check_int("p", p, 1)
    check_float("eps", eps, 0.0, 1.0, low_open=True, high_open=True)
    check_choice("head", head, HEADS)
    scalar = isinstance(i, (int, np.integer)) and not isinstance(i, bool)
    arr = np.asarray(i)
    if arr.dtype.kind not in "iu" or (arr < 0).any():
        raise ValueError(f"i must be integer query position(s) >= 0, got {i!r}")
    out_of_band = arr + 1 - p
    gap = np.zeros(arr.shape, dtype=float)
    if head == "global":
        has_out = out_of_band > 0
        # a − b >= log((i + 1 − p)/p) + log((1 − ε)/ε)
        gap[has_out] = np.log(out_of_band[has_out] / p) + math.log((1.0 - eps) / eps)
    return float(gap) if scalar else gap


def band_target(n: int, p: int) -> Tensor:
    """Target attention (n, n): row i uniform over the last p keys incl. itself (over all i + 1 if i < p).

    Raises: ValueError for n or p not an integer >= 1. Source: spanviz reconstruction (toy demo).
    """
    check_int("n", n, 1)
    check_int("p", p, 1)
    band = dense_mask(head_mask_mod(1, p), 1, n)[0].float()  # (n, n)
    return band / band.sum(-1, keepdim=True)


def _sinusoidal(n: int, dim: int) -> Tensor:
    """Fixed sinusoidal position features (n, dim): sin/cos at geometric frequencies (Transformer style)."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]  # (n, 1)
    freq = torch.exp(-math.log(10_000.0) * torch.arange(dim // 2, dtype=torch.float32) / (dim // 2))  # (dim/2,)
    return torch.cat([torch.sin(pos * freq), torch.cos(pos * freq)], dim=-1)  # (n, dim)


class _PositionQK(nn.Module):
    """Q, K (n, r) from a fixed-size MLP of sinusoidal features: capacity does not grow with n."""

    def __init__(self, n: int, r: int, features: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.register_buffer("phi", _sinusoidal(n, features))
        self.q = nn.Sequential(nn.Linear(features, hidden), nn.GELU(), nn.Linear(hidden, r))
        self.k = nn.Sequential(nn.Linear(features, hidden), nn.GELU(), nn.Linear(hidden, r))

    def forward(self) -> tuple[Tensor, Tensor]:
        return self.q(self.phi), self.k(self.phi)


class _FreeQK(nn.Module):
    """Free per-position vectors Q, K ∈ R^{n×r}, N(0, 1) init."""

    def __init__(self, n: int, r: int) -> None:
        super().__init__()
        self.Q = nn.Parameter(torch.randn(n, r))
        self.K = nn.Parameter(torch.randn(n, r))

    def forward(self) -> tuple[Tensor, Tensor]:
        return self.Q, self.K


def toy_band_fit(
    n: int = 256,
    r: int = 8,
    p: int = 32,
    head: str = "global",
    steps: int = 1500,
    param: str = "free",
    lr: float = 0.02,
    seed: int = 0,
    log_every: int = 1,
    threads: int | None = 1,
) -> dict[str, Any]:
    """Fit one attention head to a dense local band and watch its max logit (teaching demo 2).

    Learns Q, K ∈ R^{n×r} so that softmax(Q Kᵀ/√r + mask) matches the target "row i uniform over the last
    p keys" (:func:`band_target`), minimising the mean over rows of KL(target ‖ attention) with Adam.
    mask = causal for ``head="global"``, window p for ``head="local"``. A rank-r global head can only
    approximate the band by inflating logits (max |logit| keeps rising); a local head matches it exactly
    with all logits equal (e.g. zero).

    Measured with the defaults (seed 0, CPU): global max |logit| 5.0 → 6.4 (step 100) → 17.8 (500) → 46.6
    (1500, still rising), KL 0.156 → 0.026 → 0.015; local KL 2·10⁻³ (100) → 10⁻⁶ (1500), max |logit|
    4.6 → 0.7. Seeds 1 and 2 reach 25.0 and 29.0 at step 1500.

    Args:
        n: positions (>= 2). r: rank / head width (>= 1). p: band width (1 <= p <= n).
        head: "global" or "local". steps: Adam steps (>= 1). lr: Adam learning rate (> 0).
        param: "free" (free Q, K, N(0, 1) init) or "position" (Q, K = small MLPs of sinusoidal position
            features: fixed parameter count, so larger n is harder).
        seed: initialisation seed. log_every: record the curves every this many steps (>= 1; step 0 and
            the last step are always recorded).
        threads: torch intra-op threads during the fit (a process-wide setting, restored afterwards); the
            problem is tiny, so 1 is fastest — on a busy 2-core machine more threads were ~10× slower.
            None keeps torch's current setting.
    Returns:
        dict with ``config`` (the arguments), ``step``, ``max_logit`` (max |QKᵀ/√r| over allowed pairs),
        ``kl`` (nats, mean over rows) — lists; entry s is the state after s Adam updates (0 = init) — and
        ``final_max_logit``, ``final_kl``, ``seconds`` (wall) and ``cpu_seconds`` (process CPU time).
    Raises:
        ValueError: naming the offending argument.
    Source: spanviz reconstruction of the mechanism claimed in arXiv 2505.15548.
    """
    check_int("n", n, 2)
    check_int("r", r, 1)
    check_int("p", p, 1)
    if p > n:
        raise ValueError(f"p must be <= n, got p={p}, n={n}")
    check_choice("head", head, HEADS)
    check_choice("param", param, ("free", "position"))
    check_int("steps", steps, 1)
    check_int("log_every", log_every, 1)
    check_int("seed", seed, 0)
    if threads is not None:
        check_int("threads", threads, 1)
    check_float("lr", lr, 0.0, low_open=True)

    config = dict(n=n, r=r, p=p, head=head, steps=steps, param=param, lr=lr, seed=seed)
    with torch_threads(threads):
        return _toy_band_fit(config, log_every)


def _toy_band_fit(config: dict[str, Any], log_every: int) -> dict[str, Any]:
    n, r, p, head, steps = (config[k] for k in ("n", "r", "p", "head", "steps"))
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.random.fork_rng(devices=[]):  # seeded init without disturbing torch's global RNG
        torch.manual_seed(config["seed"])
        qk: nn.Module = _FreeQK(n, r) if config["param"] == "free" else _PositionQK(n, r)
    opt = torch.optim.Adam(qk.parameters(), lr=config["lr"])
    target = band_target(n, p)  # (n, n)
    log_target = torch.log(target.clamp_min(1e-30))
    allowed = dense_mask(head_mask_mod(1 if head == "local" else 0, p), 1, n)[0]  # (n, n)
    on_target = target > 0

    def evaluate() -> tuple[Tensor, Tensor]:
        Q, K = qk()
        logits = Q @ K.T / math.sqrt(r)  # (n, n)
        log_attn = torch.log_softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)
        # KL(target ‖ attn) = Σ_j t_ij (log t_ij − log a_ij) over the target's support (always inside the allowed
        # set); mean over rows.
        kl = (target * (log_target - log_attn.masked_fill(~on_target, 0.0))).sum(-1).mean()
        return kl, logits

    record: dict[str, list] = {"step": [], "max_logit": [], "kl": []}
    for step in range(steps + 1):  # step s = the state after s Adam updates (0 = initialisation)
        # KL(target ‖ softmax(Q Kᵀ/√r + mask)) and the logits Q Kᵀ/√r
        kl, logits = evaluate()
        if step % log_every == 0 or step == steps:
            record["step"].append(step)
            # max |Q Kᵀ/√r| over allowed pairs
            record["max_logit"].append(float(logits.detach().abs().masked_fill(~allowed, 0.0).max()))
            record["kl"].append(float(kl.detach()))
        if step == steps:
            break
        # one Adam step on Q, K (or the MLPs that make them) down ∂KL/∂θ
        opt.zero_grad(set_to_none=True)
        kl.backward()
        opt.step()
    log.debug("toy_band_fit %s done in %.2f s", config, time.perf_counter() - t0)
    return {
        "config": config,
        **record,
        "final_max_logit": record["max_logit"][-1],
        "final_kl": record["kl"][-1],
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
    }


def head_masks(n_head: int, n_local: int, window: int, T: int, threads: int | None = None) -> np.ndarray:
    """bool (H, T, T): True where query i (row) may attend key j (column), per head.

    Args:
        n_head: H. n_local: local heads (the first ones), 0..H. window: p >= 1. T: context length.
        threads: torch intra-op threads (None: leave torch's setting).
    Raises:
        What :func:`head_mask_mod` / :func:`dense_mask` raise (bad sizes).
    """
    mod = head_mask_mod(n_local=n_local, window=window)
    with torch_threads(threads):
        return dense_mask(mod, n_head, T).numpy()  # (H, T, T)


def head_labels(n_head: int, n_local: int, window: int) -> list[str]:
    """One title per head: ``"head h: local (p=…)"`` for the first ``n_local``, ``"head h: global"`` after."""
    return [f"head {h}: local (p={window})" if h < n_local else f"head {h}: global" for h in range(n_head)]


def print_masks(n_head: int = 4, n_local: int = 3, window: int = 3, T: int = 10) -> None:
    """Print the per-head masks of a small example (■ allowed, · masked) and the block mask at T 1024.

    What ``python -m spanviz.local_global`` runs (a command, so it prints). Raises: as :func:`head_mask_mod`.
    """
    mask_mod = head_mask_mod(n_local, window)
    masks = dense_mask(mask_mod, n_head, T)  # (H, T, T)
    for h in range(n_head):
        kind = f"local, p = {window}" if h < n_local else "global"
        print(f"head {h} ({kind}): {int(masks[h].sum())} allowed (query, key) pairs")
        for row in masks[h].tolist():
            print("  " + " ".join("■" if allowed else "·" for allowed in row))
    print(f"\n{mask_mod.__name__} at T = 1024 in 128×128 tiles (the tiles FlexAttention computes):")
    print(block_mask(mask_mod, n_head, 1024, "cpu"))
