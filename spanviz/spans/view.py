"""The spans panel's analytic view: the blocks of dS and the principal angles, from one batch (no widgets).

It builds a model, so it sits in the probes layer and is not re-exported by ``spanviz.spans`` (that would make
``spanviz.model`` import itself through the package): import it as ``spanviz.spans.view``.

A random-init :class:`~spanviz.model.TinyGPT` runs one forward/backward pass on a fixed batch
(``spans.capture_score_grads``); per layer that gives dS (B, H, T, T) and q, k, v (B, H, T, d_head). The panel
then shows, for batch element 0 and the picked head, the blocks of dS for a preset (``spans.decompose``) and the
principal angles between the token-space spans of Q, K and V (``spans.principal_angle_cosines``). Each is
computed once — blocks per (preset, layer), angles per layer, for all heads at once — and cached, so moving the
head picker or an α slider does no tensor work.

Source: arXiv 2512.13033 (span / violation scaling); the block construction is spanviz's (docs/spans.md).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch

from spanviz import spans
from spanviz.model import GPTConfig, TinyGPT
from spanviz.threads import torch_threads

ANGLE_PAIRS = ("Q–K", "Q–V", "K–V")
"""The pairs of spans whose principal angles are shown, in this order."""


class ScoreGradientViews:
    """dS, q, k, v of one batch through a random-init model, and the blocks and angles drawn from them.

    Args:
        model_cfg: the model (its span transforms are switched off and dropout set to 0 for the pass).
        batch: (x, y) token ids (B, T); default B = 2 random windows of T = ``context_length`` from ``seed``.
        seed: torch seed of the model's initialisation (and of the default batch).
        threads: torch intra-op threads for the tensor work (None: leave torch's setting).

    Attributes:
        model, batch, captures: the model, the batch and ``spans.capture_score_grads(model, batch)`` (per layer).
    Raises:
        What ``spans.capture_score_grads`` raises (a bad batch).
    """

    def __init__(self, model_cfg: GPTConfig, batch: tuple[torch.Tensor, torch.Tensor] | None = None, seed: int = 0,
                 threads: int | None = None) -> None:
        self.threads = threads
        torch.manual_seed(seed)
        self.model = TinyGPT(replace(model_cfg, spans=None, dropout=0.0))
        if batch is None:
            gen = torch.Generator().manual_seed(seed)
            ids = torch.randint(model_cfg.vocab_size, (2, model_cfg.context_length + 1), generator=gen)  # (2, T + 1)
            batch = (ids[:, :-1], ids[:, 1:])  # (2, T) each
        self.batch = batch
        with torch_threads(threads):
            self.captures = spans.capture_score_grads(self.model, batch)  # per layer: dS, q, k, v (B, H, T, ·)
        self._blocks: dict[tuple[str, int], np.ndarray] = {}
        self._angles: dict[int, dict[str, np.ndarray]] = {}

    def layer_blocks(self, preset: str, layer: int) -> np.ndarray:
        """Blocks (n_blocks, H, T, T) of dS for batch element 0 at one layer (they sum to dS); cached."""
        key = (preset, layer)
        if key not in self._blocks:
            cap = self.captures[layer]
            first = [t[0].float() for t in (cap.dS, cap.q, cap.k, cap.v)]  # (H, T, T), (H, T, d_head) ×3
            with torch_threads(self.threads):
                self._blocks[key] = spans.decompose(*first, preset).numpy()  # (n_blocks, H, T, T)
        return self._blocks[key]

    def blocks(self, preset: str, layer: int, head: int) -> list[dict[str, Any]]:
        """The blocks of one head as ``plots.span_blocks_*`` takes them: ``{"name", "order", "block" (T, T)}``."""
        blocks = self.layer_blocks(preset, layer)[:, head]  # (n_blocks, T, T)
        return [{"name": n, "order": o, "block": b}
                for n, o, b in zip(spans.block_names(preset), spans.block_orders(preset), blocks)]

    def layer_angles(self, layer: int) -> dict[str, np.ndarray]:
        """Principal angles (H, d_head) in radians, ascending, between the spans of Q, K, V at one layer; cached."""
        if layer not in self._angles:
            cap = self.captures[layer]
            qkv = dict(zip("QKV", (t[0] for t in (cap.q, cap.k, cap.v))))  # (H, T, d_head): d_head-dim spans in R^T
            with torch_threads(self.threads):
                # θ = arccos(σ_i(Q_Xᵀ Q_Y)), the singular values of the product of orthonormal bases
                self._angles[layer] = {
                    pair: np.arccos(spans.principal_angle_cosines(qkv[pair[0]], qkv[pair[-1]]).numpy())
                    for pair in ANGLE_PAIRS
                }
        return self._angles[layer]

    def angles(self, layer: int, head: int) -> dict[str, np.ndarray]:
        """``{"Q–K": (d_head,), "Q–V": ..., "K–V": ...}`` radians for one head, as ``plots.subspace_angles_*`` takes."""
        return {pair: a[head] for pair, a in self.layer_angles(layer).items()}
