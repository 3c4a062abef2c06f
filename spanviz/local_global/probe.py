"""LS-attention measurements on a model: max logit and attention entropy per layer and head, and the trainer probe.

Both read the explicit path of :class:`spanviz.model.TinyGPT` through its hook points (``hook_attn_scores``,
``hook_pattern``): fused kernels never expose the logits.
Source: the metric of arXiv 2505.15548 ("max logit"), measured as in spanviz's reconstruction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from spanviz.contexts import eval_mode
from spanviz.validators import check_bool, check_int, check_tensor


def _check_tokens(x: Any, model: nn.Module) -> None:
    if not isinstance(x, Tensor) or x.dim() != 2 or x.dtype != torch.long:
        desc = f"{tuple(x.shape)} {x.dtype}" if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x must be a (B, T) tensor of token ids (torch.long), got {desc}")
    if not hasattr(model, "blocks") or not hasattr(model, "hooks"):
        raise ValueError(f"model must be a spanviz TinyGPT, got {type(model).__name__}")
    check_tensor("x", x, kind="integer")
    vocab_size = getattr(getattr(model, "cfg", None), "vocab_size", None)
    if vocab_size is not None:  # a probe reads its results back anyway: the range check's synchronisation is free
        low, high = int(x.min()), int(x.max())
        if low < 0 or high >= vocab_size:
            raise ValueError(f"x must hold token ids in [0, {vocab_size}) (the model's vocab_size), "
                             f"got {low if low < 0 else high}")


@torch.no_grad()
def _logit_stats(model: nn.Module, x: Tensor, entropy: bool) -> tuple[Tensor, Tensor | None]:
    """(max |S| over allowed pairs (L, H), mean row entropy (L, H) or None), fp32, explicit path, eval mode."""
    _check_tokens(x, model)
    n_layer, n_head = len(model.blocks), model.blocks[0].attn.n_head
    max_abs = torch.zeros(n_layer, n_head)
    ent = torch.zeros(n_layer, n_head) if entropy else None

    def on_scores(layer: int) -> Callable[[Tensor], None]:
        def fn(scores: Tensor) -> None:  # (B, H, T, T), pre-mask
            allowed = model.blocks[layer].attn.allowed(scores.size(-1), scores.device)  # (H, T, T)
            s = scores.float().abs().masked_fill(~allowed, 0.0)  # |S| >= 0: a masked 0 never beats an allowed pair
            max_abs[layer] = s.amax(dim=(0, 2, 3)).cpu()  # (H,)

        return fn

    def on_pattern(layer: int) -> Callable[[Tensor], None]:
        def fn(pattern: Tensor) -> None:  # (B, H, T, T), rows sum to 1
            # H(row i) = −Σ_j a_ij log a_ij
            row_entropy = torch.special.entr(pattern.float()).sum(-1)  # (B, H, T), nats
            ent[layer] = row_entropy.mean(dim=(0, 2)).cpu()  # (H,)

        return fn

    hooks: dict[str, Callable[[Tensor], None]] = {}
    for i in range(n_layer):
        hooks[f"blocks.{i}.attn.hook_attn_scores"] = on_scores(i)
        if entropy:
            hooks[f"blocks.{i}.attn.hook_pattern"] = on_pattern(i)
    with eval_mode(model), torch.autocast(device_type=x.device.type, enabled=False), model.hooks(hooks):
        model(x)
    return max_abs, ent


def max_logits(model: nn.Module, x: Tensor) -> Tensor:
    """Max |q·k|/√d_head over **allowed** (query, key) pairs, per layer and head, on tokens x.

    Runs one forward pass of ``model`` (a :class:`spanviz.model.TinyGPT`) in eval mode, without autocast
    (fp32 for an fp32 model), through the explicit path (hooks on ``hook_attn_scores`` force it); the
    pre-mask scores are masked with ``block.attn.allowed(T, device)``. The model's train/eval mode is
    restored.

    Args:
        model: TinyGPT. x: (B, T) long token ids, T <= context_length.
    Returns:
        float32 CPU tensor (n_layer, n_head), dimensionless logits.
    Raises:
        ValueError: x not a (B, T) long tensor, or model not a TinyGPT.
    Source: the metric of arXiv 2505.15548 ("max logit"), measured as in spanviz's reconstruction.
    """
    return _logit_stats(model, x, entropy=False)[0]


def attention_entropy(model: nn.Module, x: Tensor) -> Tensor:
    """Mean attention entropy per layer and head: −Σ_j a_ij log a_ij averaged over batch and queries i.

    Same pass as :func:`max_logits` (explicit path, eval mode, no autocast).

    Returns:
        float32 CPU tensor (n_layer, n_head) in nats. A local head's entropy is at most log p; a uniform
        global row at position i has log(i + 1).
    Raises:
        ValueError: as :func:`max_logits`.
    """
    return _logit_stats(model, x, entropy=True)[1]


class LogitProbe:
    """Trainer probe: max logits over allowed pairs and attention entropy on the trainer's fixed batch.

    Protocol (``spanviz.train``): attributes ``name`` and ``every``; ``probe(trainer)`` is called every
    ``every`` steps and returns a JSON-able dict. Reads ``trainer.model`` (TinyGPT) and
    ``trainer.probe_batch`` (x, y) — x (B, T) long; one extra forward pass (explicit path, eval mode, no
    grad, no autocast: fp32 for an fp32 model), which materialises (B, H, T, T) scores one layer at a time;
    nothing is computed when the probe is not installed.

    Returned keys:
        ``logits/max``: float, max over layers and heads;
        ``logits/max_per_layer``: list (n_layer) of floats;
        ``logits/max_per_head``: list (n_layer) of lists (n_head) of floats;
        ``attn/entropy_per_head``: list (n_layer) of lists (n_head), nats (only with ``entropy=True``).

    Args:
        every: probe period in steps (integer >= 1).
        entropy: also record attention entropy per head (default True).
        name: probe name (non-empty string), default "logits".
    Raises:
        ValueError: every not an integer >= 1, or name not a non-empty string.
    """

    def __init__(self, every: int = 50, *, entropy: bool = True, name: str = "logits") -> None:
        every = check_int("every", every, 1)
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        self.every, self.entropy, self.name = every, check_bool("entropy", entropy), name

    def __call__(self, trainer: Any) -> dict[str, Any]:
        x = trainer.probe_batch[0]
        max_abs, ent = _logit_stats(trainer.model, x, entropy=self.entropy)
        out: dict[str, Any] = {
            "logits/max": float(max_abs.max()),
            "logits/max_per_layer": max_abs.amax(dim=1).tolist(),
            "logits/max_per_head": max_abs.tolist(),
        }
        if ent is not None:
            out["attn/entropy_per_head"] = ent.tolist()
        return out

    def __repr__(self) -> str:
        return f"LogitProbe(every={self.every}, entropy={self.entropy}, name={self.name!r})"
