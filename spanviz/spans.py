"""Span / violation gradient scaling (arXiv 2512.13033) — interface placeholder, implemented next."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import Tensor

PRESETS = ("kv8", "qkv8", "qk4")


@dataclass(frozen=True)
class SpanConfig:
    """Which α scale each order of the score-gradient decomposition gets, with which preset, on which layers."""

    alphas: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0)
    preset: str = "kv8"
    layers: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        alphas = tuple(float(a) for a in self.alphas)
        if len(alphas) != 4 or not all(math.isfinite(a) for a in alphas):
            raise ValueError(f"alphas must be 4 finite numbers (α0..α3), got {self.alphas!r}")
        object.__setattr__(self, "alphas", alphas)
        if self.preset not in PRESETS:
            raise ValueError(f"preset must be one of {PRESETS}, got {self.preset!r}")
        if self.layers is not None:
            object.__setattr__(self, "layers", tuple(self.layers))

    def check_layers(self, n_layer: int) -> None:
        if self.layers is not None and any(not 0 <= i < n_layer for i in self.layers):
            raise ValueError(f"spans.layers must be in [0, {n_layer}), got {self.layers}")

    def applies_to(self, layer: int) -> bool:
        return self.layers is None or layer in self.layers

    def to_dict(self) -> dict[str, Any]:
        return {"alphas": list(self.alphas), "preset": self.preset, "layers": None if self.layers is None else list(self.layers)}


def build_grad_fns(cfg: SpanConfig) -> tuple[Callable | None, Callable | None]:
    raise NotImplementedError
