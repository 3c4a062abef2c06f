"""Measurements: the span geometry of q, k, v (tensors only: principal angles between the spans, Gram
conditioning, the ridge's bias, the energy share per order of the blocks of :func:`~spanviz.spans.core.decompose`),
and, on a model, the score gradient each layer sees (:func:`capture_score_grads`), its blocks per layer and head
(:func:`score_grad_blocks`), what the α scaling does to dQ and dK (:func:`grad_alignment`), and the opt-in
training probe :class:`SpanProbe` that records them.

Works on a :class:`spanviz.model.TinyGPT` (duck-typed: ``blocks[i].attn.score_grad_fn``, ``cfg.spans``).
Source: spanviz (the decomposition is its reconstruction of arXiv 2512.13033, see :mod:`spanviz.spans.core`);
principal angles and condition numbers are the standard definitions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from spanviz.contexts import eval_mode
from spanviz.spans.config import (
    DEFAULT_RIDGE,
    Slot,
    SpanConfig,
    block_formulas,
    block_names,
    block_orders,
    resolve_ridge,
    resolve_slots,
)
from spanviz.spans.core import decompose
from spanviz.spans.fused import ScoreGradFn, build_grad_fns
from spanviz.validators import check_bool, check_int, check_tensor

# ------------------------------------------------------------------------- span geometry (tensors only)

def order_energy_share(blocks: Tensor, orders: Sequence[int]) -> Tensor:
    """Energy share of each order per head.

    Args:
        blocks: (n_blocks, B, H, T, T) as from :func:`decompose`.
        orders: order of each block.
    Returns:
        (max(orders) + 1, H): ‖D_o‖² / Σ_o ‖D_o‖² with D_o = Σ of the blocks of order o (norm over B, T, T).
        Zero everywhere if dS = 0.
    """
    n_orders = max(orders) + 1
    per_order = torch.stack([
        blocks[[i for i, o in enumerate(orders) if o == order]].sum(0) for order in range(n_orders)
    ])  # (n_orders, B, H, T, T)
    # share_o = ‖D_o‖² / Σ_o ‖D_o‖²
    energy = per_order.double().pow(2).sum(dim=(1, 3, 4))  # (n_orders, H)
    total = energy.sum(0, keepdim=True)
    return torch.where(total > 0, energy / total.clamp_min(1e-300), torch.zeros_like(energy)).float()


def principal_angle_cosines(X: Tensor, Y: Tensor) -> Tensor:
    """Cosines of the principal angles between the column spans of X and Y in R^T, largest first.

    Args:
        X: (..., T, d_x); Y: (..., T, d_y) (same leading dims). Computed in float64.
    Returns:
        (..., min(d_x, d_y, T)) cosines in [0, 1]: singular values of Q_Xᵀ Q_Y with Q_X, Q_Y orthonormal
        bases from reduced QR (assumes full column rank; with T <= d both spans are R^T and all cosines 1).
        Angles in radians: ``torch.arccos(cos.clamp(-1, 1))``.
    Raises:
        ValueError: mismatched shapes; X or Y not a finite, non-empty floating-point tensor, or on another device.
    Source: Björck & Golub (1973), the standard method.
    """
    check_tensor("X", X, min_ndim=2, finite=True)
    check_tensor("Y", Y, min_ndim=2, finite=True, device=X.device)
    if X.dim() < 2 or Y.dim() < 2 or X.shape[:-1] != Y.shape[:-1]:
        raise ValueError(
            f"X and Y must have shapes (..., T, d_x) and (..., T, d_y), got {tuple(X.shape)} and {tuple(Y.shape)}"
        )
    qx = torch.linalg.qr(X.detach().double()).Q  # (..., T, d_x), orthonormal columns
    qy = torch.linalg.qr(Y.detach().double()).Q  # (..., T, d_y)
    # cos θ_i = σ_i(Q_Xᵀ Q_Y)
    return torch.linalg.svdvals(qx.transpose(-2, -1) @ qy).clamp(0.0, 1.0)


def gram_condition(X: Tensor) -> Tensor:
    """Condition number κ(XᵀX) = (σ_max/σ_min)² of the d×d Gram of X (..., T, d), in float64; inf when
    X is rank deficient (always when T < d). Returns (...,). Source: standard definition."""
    if X.dim() < 2:
        raise ValueError(f"X must have shape (..., T, d), got {tuple(X.shape)}")
    s = torch.linalg.svdvals(X.detach().double())  # (..., min(T, d)), largest first
    if X.shape[-2] < X.shape[-1]:
        return torch.full(s.shape[:-1], math.inf, dtype=torch.float64, device=s.device)
    # κ(XᵀX) = (σ_max/σ_min)²
    return torch.where(s[..., -1] > 0, (s[..., 0] / s[..., -1]).pow(2), torch.full_like(s[..., 0], math.inf))


def ridge_bias(X: Tensor, ridge: float = DEFAULT_RIDGE) -> Tensor:
    """How much the ridge under-projects: ‖Π_X − Π_X,ridge‖₂ = λ/(s_min² + λ), λ = ε·tr(XᵀX)/d.

    Π_X,ridge = X(XᵀX + λI)⁻¹Xᵀ has eigenvalues s_i²/(s_i² + λ) on the span of X (s_i its singular values),
    so the worst direction loses λ/(s_min² + λ) ≤ ε·(tr(XᵀX)/d)/s_min² ≤ ε·κ(XᵀX) of its length (at the
    default ε = 1e-6: ≈ 4e-6 at κ 8, ≈ 2.6e-4 at κ 3e3).

    Args: X: (..., T, d) with T > d; ridge: ε >= 0. Computed in float64.
    Returns: (...,) the bias, in [0, 1] (1 when X is rank deficient: a direction of the span is lost).
    Raises: ValueError for X with T <= d (no ridge is used there) or a bad ridge.
    Source: spanviz (spectral calculus of the ridge projector).
    """
    if X.dim() < 2 or X.shape[-2] <= X.shape[-1]:
        raise ValueError(f"X must have shape (..., T, d) with T > d, got {tuple(X.shape)}")
    ridge = resolve_ridge(None, ridge)
    s2 = torch.linalg.svdvals(X.detach().double()).pow(2)  # (..., d)
    # λ = ε·tr(XᵀX)/d = ε·Σ s_i²/d
    lam = ridge * s2.sum(-1) / X.shape[-1]  # (...,)
    # bias = λ/(s_min² + λ)
    return torch.where(lam > 0, lam / (s2[..., -1] + lam), torch.zeros_like(lam))


# ----------------------------------------------------------------------------------------- on a model

@dataclass
class ScoreGradCapture:
    """One layer's score gradient and its inputs, captured during one backward pass.

    Fields: ``layer``; ``dS`` (B, H, T, T), ∂L/∂S of the pre-mask scores as it arrived at the layer (before
    that layer's own transform); ``q``, ``k``, ``v`` (B, H, T, d_head), detached. All float, on the model's
    device.
    """

    layer: int
    dS: Tensor
    q: Tensor
    k: Tensor
    v: Tensor


def _check_model_batch(model: Any, batch: Any) -> tuple[Tensor, Tensor]:
    if not hasattr(model, "blocks") or not hasattr(model, "cfg"):
        raise ValueError(f"model must be a spanviz TinyGPT, got {type(model).__name__}")
    if not isinstance(batch, (tuple, list)) or len(batch) != 2 or not all(isinstance(t, Tensor) for t in batch):
        raise ValueError(f"batch must be a pair (x, y) of (B, T) token tensors, got {type(batch).__name__}")
    x, y = batch
    if x.dim() != 2 or x.shape != y.shape:
        raise ValueError(f"batch must be (x, y) with equal shapes (B, T), got {tuple(x.shape)} and {tuple(y.shape)}")
    return x, y


def capture_score_grads(model: Any, batch: tuple[Tensor, Tensor]) -> list[ScoreGradCapture]:
    """Run one forward/backward of ``model`` on ``batch`` through the explicit path and capture, per layer,
    dS (the gradient of the pre-mask scores) and detached q, k, v.

    The model's configured span transforms stay active (so dS is what that layer sees in training);
    the model is put in eval mode for the pass (no dropout, no RNG use) and its ``.grad`` tensors and
    train/eval flag are restored afterwards: parameters and gradients are left as they were.

    Args:
        model: a :class:`spanviz.model.TinyGPT`.
        batch: (x, y), token ids (B, T) long.
    Returns:
        one :class:`ScoreGradCapture` per layer, layer 0 first.
    Raises:
        ValueError: bad model or batch.
    Source: spanviz.
    """
    x, y = _check_model_batch(model, batch)
    captured: dict[int, ScoreGradCapture] = {}
    attns = [block.attn for block in model.blocks]
    saved_fns = [attn.score_grad_fn for attn in attns]
    saved_grads = [(p, p.grad) for p in model.parameters()]

    def capture(layer: int, original: ScoreGradFn | None) -> ScoreGradFn:
        def fn(dS: Tensor, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            captured[layer] = ScoreGradCapture(layer, dS.detach().clone(), q, k, v)
            return dS if original is None else original(dS, q, k, v)

        return fn

    with eval_mode(model):
        try:
            for p, _ in saved_grads:
                p.grad = None
            for attn, original in zip(attns, saved_fns):
                attn.score_grad_fn = capture(attn.layer, original)
            with torch.enable_grad():
                _, loss = model(x, y)
                loss.backward()
        finally:
            for attn, original in zip(attns, saved_fns):
                attn.score_grad_fn = original
            for p, g in saved_grads:
                p.grad = g
    return [captured[i] for i in sorted(captured)]


@dataclass
class LayerBlocks:
    """The blocks of one layer's score gradient for one batch (from :func:`score_grad_blocks`).

    Fields:
        layer: layer index.
        names, orders, formulas: per block, S1 first (see :func:`block_table`).
        norms: (n_blocks, H) Frobenius norm of each block over the batch, per head.
        ds_norm: (H,) Frobenius norm of dS per head.
        order_share: (n_orders_used, H) energy share of each order: ‖D_o‖² / Σ_o ‖D_o‖², D_o = the sum of
            the blocks of order o. (Each slot splits the matrix it acts on into two orthogonal parts, so the
            energies add up along the slots: Σ_blocks ‖block‖² = ‖dS‖², and the shares ‖block‖²/‖dS‖² —
            ``rel_norm``² in :meth:`rows` — sum to 1, exactly for exact projectors and to about ε·κ with the
            ridge. Blocks on different branches need not be orthogonal to each other, so the blocks of one
            order can interfere: Σ_o ‖D_o‖² differs from ‖dS‖², hence the normalisation.)
        blocks: (n_blocks, H, T, T) the blocks of batch element ``sample`` (for heatmaps).
    """

    layer: int
    names: list[str]
    orders: list[int]
    formulas: list[str]
    norms: Tensor
    ds_norm: Tensor
    order_share: Tensor
    blocks: Tensor

    def rows(self) -> list[dict[str, Any]]:
        """Tidy rows: one dict per (head, block) with layer, head, block, order, formula, norm, rel_norm."""
        out = []
        for h in range(self.norms.shape[1]):
            ds = float(self.ds_norm[h])
            for i, name in enumerate(self.names):
                norm = float(self.norms[i, h])
                out.append({
                    "layer": self.layer, "head": h, "block": name, "order": self.orders[i],
                    "formula": self.formulas[i], "norm": norm, "rel_norm": norm / ds if ds > 0 else float("nan"),
                })
        return out


def score_grad_blocks(
    model: Any, batch: tuple[Tensor, Tensor], decomposition: str | SpanConfig | Sequence[Slot] | None = None,
    *, sample: int = 0, captures: list[ScoreGradCapture] | None = None,
) -> list[LayerBlocks]:
    """Every block of dS for each layer and head, for one batch, with names, orders and norms.

    Args:
        model: a TinyGPT; batch: (x, y) (B, T).
        decomposition: preset, slots or SpanConfig; None = the model's span config, else "kv8".
        sample: which batch element's blocks to keep in ``LayerBlocks.blocks``.
        captures: reuse the output of :func:`capture_score_grads` instead of running a new pass.
    Returns:
        one :class:`LayerBlocks` per layer.
    Raises:
        ValueError: bad model, batch, decomposition or sample.
    Source: spanviz.
    """
    x, _ = _check_model_batch(model, batch)
    if decomposition is None:
        decomposition = model.cfg.spans if model.cfg.spans is not None else "kv8"
    slots = resolve_slots(decomposition)
    ridge = resolve_ridge(decomposition, None)
    sample = check_int("sample", sample, 0, x.shape[0] - 1)
    captures = capture_score_grads(model, batch) if captures is None else captures
    names, orders, formulas = block_names(slots), block_orders(slots), block_formulas(slots)
    out = []
    for c in captures:
        blocks = decompose(c.dS.float(), c.q.float(), c.k.float(), c.v.float(), slots, ridge=ridge)
        out.append(LayerBlocks(
            layer=c.layer, names=names, orders=orders, formulas=formulas,
            norms=blocks.pow(2).sum(dim=(1, 3, 4)).sqrt(),
            ds_norm=c.dS.float().pow(2).sum(dim=(0, 2, 3)).sqrt(),
            order_share=order_energy_share(blocks, orders),
            blocks=blocks[:, sample].clone(),
        ))
    return out


def grad_alignment(capture: ScoreGradCapture, cfg: SpanConfig) -> dict[str, Tensor]:
    """How much the transform of ``cfg`` changes dQ and dK at one layer, per head.

    dQ = dS K/√d, dK = dSᵀ Q/√d (standard); dQ', dK' = what training with ``cfg`` uses (score transform,
    or the qk4 closed form). Returns {"cos_dq", "ratio_dq", "cos_dk", "ratio_dk"}, each (H,):
    cos(dQ', dQ) and ‖dQ'‖/‖dQ‖ over (B, T, d_head) (NaN where dQ = 0).
    Raises: ValueError for a bad cfg. Source: spanviz.
    """
    score_fn, qk_fn = build_grad_fns(cfg)
    dS, q, k, v = (t.float() for t in (capture.dS, capture.q, capture.k, capture.v))
    scale = 1.0 / math.sqrt(q.shape[-1])
    dq, dk = dS @ k * scale, dS.transpose(-2, -1) @ q * scale
    if score_fn is not None:
        dS2 = score_fn(dS, q, k, v)
        dq2, dk2 = dS2 @ k * scale, dS2.transpose(-2, -1) @ q * scale
    else:
        dq2, dk2 = qk_fn(dq, q, "q"), qk_fn(dk, k, "k")
    out = {}
    for name, g, g2 in (("dq", dq, dq2), ("dk", dk, dk2)):
        g, g2 = g.double(), g2.double()
        dims = (0, 2, 3)
        n, n2 = g.pow(2).sum(dims).sqrt(), g2.pow(2).sum(dims).sqrt()
        out[f"cos_{name}"] = ((g * g2).sum(dims) / (n * n2)).float()
        out[f"ratio_{name}"] = (n2 / n).float()
    return out


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


class SpanProbe:
    """Opt-in training probe: span geometry and what the α scaling does, measured on the fixed probe batch.

    Trainer protocol: ``name``, ``every`` (steps), and ``probe(trainer) -> dict`` of JSON-able values, where
    ``trainer.model`` is a TinyGPT and ``trainer.probe_batch`` an (x, y) pair. Costs one extra forward and
    backward (explicit path) plus the 2ⁿ-block decomposition, every ``every`` steps; nothing when not used.

    Args:
        every: probe interval in steps, >= 1.
        cfg: the decomposition and α to evaluate; None = the model's span config, or kv8 [1000] when the
            model trains with the standard gradient (then the numbers say what [1000] *would* do).
        per_head: also record per-head values.
    Keys (l = layer, o = order, XY ∈ {QK, QV, KV}, X ∈ {Q, K, V}; averages over heads, and over the batch
    for span geometry): ``spans/L{l}/share_order{o}`` (energy share of order o in dS),
    ``spans/L{l}/cos_dq``, ``ratio_dq``, ``cos_dk``, ``ratio_dk`` (cos(dQ', dQ), ‖dQ'‖/‖dQ‖),
    ``spans/L{l}/cos_{XY}_mean`` and ``cos_{XY}_min`` (principal-angle cosines between spans),
    ``spans/L{l}/log10_cond_{X}`` (log10 κ of the Gram XᵀX; None when infinite) and, for T > d_head,
    ``spans/L{l}/ridge_bias_{X}`` (the worst :func:`ridge_bias` over batch and heads); with ``per_head`` also
    ``spans/L{l}/h{h}/share_order{o}``, ``.../h{h}/cos_dq``, ``.../h{h}/ratio_dq``.
    Raises:
        ValueError: bad ``every`` or ``cfg``.
    Source: spanviz.
    """

    name = "spans"

    def __init__(self, every: int = 50, cfg: SpanConfig | None = None, per_head: bool = False) -> None:
        self.every = check_int("every", every, 1)
        if cfg is not None and not isinstance(cfg, SpanConfig):
            raise ValueError(f"cfg must be a SpanConfig or None, got {type(cfg).__name__}")
        self.cfg = cfg
        self.per_head = check_bool("per_head", per_head)

    def describe(self) -> dict[str, Any]:
        """JSON-ready settings (for the run config and the results-store key)."""
        return {"cfg": None if self.cfg is None else self.cfg.to_dict(), "per_head": self.per_head}

    def _config(self, model: Any) -> SpanConfig:
        if self.cfg is not None:
            return self.cfg
        return model.cfg.spans if model.cfg.spans is not None else SpanConfig(alphas="1000")

    def __call__(self, trainer: Any) -> dict[str, Any]:
        model, batch = trainer.model, trainer.probe_batch
        cfg = self._config(model)
        captures = capture_score_grads(model, batch)
        reports = score_grad_blocks(model, batch, cfg, captures=captures)
        out: dict[str, Any] = {}
        for c, rep in zip(captures, reports):
            p = f"spans/L{c.layer}"
            shares = rep.order_share  # (n_orders, H)
            for o in range(shares.shape[0]):
                out[f"{p}/share_order{o}"] = float(shares[o].mean())
            align = grad_alignment(c, cfg)
            for key, val in align.items():
                out[f"{p}/{key}"] = _finite_or_none(float(val.mean()))
            for a, b in (("Q", "K"), ("Q", "V"), ("K", "V")):
                cos = principal_angle_cosines(getattr(c, a.lower()), getattr(c, b.lower()))
                out[f"{p}/cos_{a}{b}_mean"] = float(cos.mean())
                out[f"{p}/cos_{a}{b}_min"] = float(cos[..., -1].mean())
            for name in ("Q", "K", "V"):
                X = getattr(c, name.lower())
                kappa = gram_condition(X)
                out[f"{p}/log10_cond_{name}"] = _finite_or_none(float(kappa.log10().mean()))
                if X.shape[-2] > X.shape[-1]:
                    out[f"{p}/ridge_bias_{name}"] = float(ridge_bias(X, cfg.ridge).max())
            if self.per_head:
                for h in range(shares.shape[1]):
                    for o in range(shares.shape[0]):
                        out[f"{p}/h{h}/share_order{o}"] = float(shares[o, h])
                    out[f"{p}/h{h}/cos_dq"] = _finite_or_none(float(align["cos_dq"][h]))
                    out[f"{p}/h{h}/ratio_dq"] = _finite_or_none(float(align["ratio_dq"][h]))
        return out
