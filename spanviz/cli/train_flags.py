"""``spanviz train``'s flags: the command (:class:`TrainCommand`: the data, GPTConfig and TrainConfig fields, span
scaling, probes, --out, --resume, --store, --config) and the two flag groups that are not config fields
(:class:`SpanOptions`, :class:`ProbeOptions`). A leaf: what the flags mean for a run is :mod:`spanviz.cli.train_plans`,
what the command does with them :mod:`spanviz.cli.train`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

from spanviz.cli.common import DataOptions
from spanviz.model import GPTConfig
from spanviz.spans.config import PRESETS
from spanviz.train import TrainConfig


@dataclass(frozen=True)
class SpanOptions:
    """Span / violation gradient scaling (arXiv 2512.13033): off unless --spans-preset or --alphas is given."""

    spans_preset: Literal[PRESETS] | None = None
    """the decomposition: kv8, qkv8 or qk4 (kv8 when only --alphas is given)."""
    alphas: Annotated[str | None, tyro.conf.arg(help="α per order, α0 first: digits as in the paper (1000, "
                                                   "1110) or numbers (1,0.5,0,0); 1111 when only --spans-preset "
                                                   "is given.")] = None
    spans_layers: tuple[int, ...] | None = None
    """layer indices (0-based) the scaling applies to; default: every layer."""


@dataclass(frozen=True)
class ProbeOptions:
    """Probes: opt-in measurements written to the run record's history."""

    logit_probe: bool = False
    """max |q·k|/√d_head per layer and head, attention entropy (arXiv 2505.15548); every --probe-every updates."""
    spans_probe: bool = False
    """span geometry: energy share by order, cosines, principal angles (arXiv 2512.13033); every --probe-every."""
    fp8_probe: bool = False
    """max logits, bounds, scales, E4M3 overflows (arXiv 2602.18851): every step, regardless of --probe-every."""
    probe_every: int = 10
    """updates between --logit-probe / --spans-probe measurements (and after the last update), >= 1."""


@dataclass(frozen=True, kw_only=True)
class TrainCommand:
    """Train a TinyGPT: run.json + checkpoint.pt in --out (checkpointed at every evaluation), record in the store."""

    data: Annotated[DataOptions, tyro.conf.OmitArgPrefixes] = DataOptions()
    model: Annotated[GPTConfig, tyro.conf.OmitArgPrefixes]
    spans: Annotated[SpanOptions, tyro.conf.OmitArgPrefixes] = SpanOptions()
    train: Annotated[TrainConfig, tyro.conf.OmitArgPrefixes]
    probes: Annotated[ProbeOptions, tyro.conf.OmitArgPrefixes] = ProbeOptions()
    out: Path | None = None
    """folder for run.json and checkpoint.pt, locked while training; without it only the results store keeps the run."""
    resume: bool = False
    """continue the run in --out from its last checkpoint; with --steps N extend it (a finished one too) to N."""
    store: bool = True
    """put the finished (or diverged) run into the results store ($SPANVIZ_HOME/runs): runs export ships it."""
    config: Path | None = None
    """JSON with `model` / `train` sections (GPTConfig / TrainConfig fields; a run.json works): flags override it."""
    verbose: bool = False
    """log at INFO level."""


__all__ = ["ProbeOptions", "SpanOptions", "TrainCommand"]
