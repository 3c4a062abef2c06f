"""Paper-sized runs on a CUDA GPU: LS-attention logit growth at T 2048 and the span-scaling head sweep.

What it trains (WikiText-2: train on the validation split, evaluate on the test split — the offline copy has
no train split; the run records say so):

* ``ls``: :func:`spanviz.experiments.ls.ls_sweep` at size "gpu" — MHSA vs LS (5 local heads, p = 50, + 1
  global) vs QK-norm, 6 layers, d_model 192, 6 heads × 32, T 2048, batch 16, 2000 updates at lr 6e-3, bf16,
  FlexAttention for every variant, max logit probed every 25 updates (the ``spanviz sweep ls --size gpu`` runs);
* ``spans``: the head sweep at d_model 256 (4 layers, T 256, dropout 0.1, batch 32, lr 1e-3, bf16): for 4, 8
  and 16 heads (d_head 64, 32, 16), kv8 [1000] against kv8 [1111]. [1111] returns the score gradient
  untouched through the same explicit attention path and the same dropout as [1000], so the pair differs
  only by the scaling (plain "standard" training runs fused attention, whose dropout draws other random
  numbers).

Every run lands in the results store (``$SPANVIZ_HOME/runs``); a rerun replays what is there, so seeds (and,
with ``--variants``, single variants) can train in parallel processes and one last call summarises them all::

    python scripts/gpu_paper_runs.py ls --seeds 0 --ls-steps 1000 --data-dir DIR &      # one process per seed ...
    python scripts/gpu_paper_runs.py spans --seeds 0 --spans-steps 1000 --data-dir DIR --variants "heads=4/[1000]" &
    wait
    python scripts/gpu_paper_runs.py summary --out results/              # ... then summarise the store

``scripts/make_workshop_bundle.py`` runs all of it (and the notebooks' defaults) in parallel processes on one GPU.

``summary`` trains nothing: it reads every run of these two experiments from the store and writes
``ls_gpu.json`` and ``spans_gpu_heads.json`` with their per-seed tables beside them (paired t-tests over seeds,
Holm within each sweep; see ``docs/results/README.md`` to recompute them). Source: spanviz; the
papers' own sizes where known (arXiv 2505.15548: 6 × 192, 5 local + 1 global, p 50, T 2048; arXiv
2512.13033 per published summaries: d_model 256 with 4 / 8 / 16 heads).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from spanviz import local_global
from spanviz.data import OFFLINE_SPLITS, prepare_tokens
from spanviz.experiments.core import run_grid
from spanviz.experiments.ls import SIZES as LS_SIZES
from spanviz.experiments.ls import ls_variants, summarize_ls
from spanviz.experiments.results import per_seed_table, save_sweep
from spanviz.experiments.spans import SIZE_DEFAULTS
from spanviz.experiments.stats import compare_groups
from spanviz.model import GPTConfig
from spanviz.spans import SpanConfig
from spanviz.store import ResultsStore
from spanviz.train import TrainConfig

SPANS_STEPS = 2000
SPANS_HEADS = (4, 8, 16)
SMOKE = dict(model=dict(context_length=64, n_layer=1),
             train=dict(warmup_steps=1, batch_size=2, eval_interval=2, eval_iters=1, device="cpu", dtype="float32"),
             steps=4)
"""``--smoke``: a seconds-long CPU rehearsal of the same code paths (tiny models, 4 updates). The updates are the
sweep's ``steps`` argument, not a ``train`` override: a sweep refuses overrides its grid sets."""


def spans_variants(vocab_size: int, steps: int = SPANS_STEPS, smoke: bool = False
                   ) -> dict[str, tuple[GPTConfig, TrainConfig]]:
    """{name: (GPTConfig, TrainConfig)} of the head sweep: "heads=H/[1111]" and "heads=H/[1000]" for each H."""
    paper = SIZE_DEFAULTS["paper"]
    train = TrainConfig(**{**paper["train"], "steps": SMOKE["steps"] if smoke else steps, "eval_interval": 100,
                           "warmup_steps": 100,
                           "device": "cuda", "dtype": "bfloat16", **(SMOKE["train"] if smoke else {})})
    variants = {}
    for h in SPANS_HEADS:
        model = {**paper["model"], "n_head": h, "vocab_size": vocab_size, **(SMOKE["model"] if smoke else {})}
        base = GPTConfig(**model)
        for alphas in ("1111", "1000"):
            variants[f"heads={h}/[{alphas}]"] = (replace(base, spans=SpanConfig(alphas=alphas, preset="kv8")), train)
    return variants


def ls_grid(vocab_size: int, steps: int | None = None, smoke: bool = False
            ) -> tuple[dict[str, tuple[GPTConfig, TrainConfig]], int]:
    """The LS sweep's variants at size "gpu" and its LogitProbe period: what
    :func:`spanviz.experiments.ls.ls_sweep` ("gpu") trains, here so that single variants can train in parallel
    processes under the same store keys."""
    overrides = dict(model=SMOKE["model"], train=SMOKE["train"], steps=SMOKE["steps"]) if smoke else dict(steps=steps)
    return ls_variants("gpu", vocab_size, **overrides), 2 if smoke else LS_SIZES["gpu"]["probe_every"]


def _pick(grid: dict[str, Any], names: list[str] | None) -> dict[str, Any]:
    """The variants of ``grid`` named in ``names`` (all when None); ValueError for a name the grid lacks."""
    if names is None:
        return grid
    unknown = [n for n in names if n not in grid]
    if unknown:
        raise ValueError(f"--variants {unknown} not in this sweep; its variants: {', '.join(grid)}")
    return {n: grid[n] for n in names}


def _data(data_dir: str | None, tokenizer: dict[str, Any]) -> Any:
    return prepare_tokens(data_dir, splits=OFFLINE_SPLITS if data_dir else None, **tokenizer)


def train_ls(seeds: list[int], data_dir: str | None, store: ResultsStore, steps: int | None,
             smoke: bool = False, variants: list[str] | None = None) -> None:
    data = _data(data_dir, LS_SIZES["gpu"]["tokenizer"])
    grid, every = ls_grid(data.vocab_size, steps, smoke)
    run_grid(_pick(grid, variants), seeds, data, store=store,
             probes_factory=lambda name, cfg: [local_global.LogitProbe(every=every)],
             tags={"experiment": "ls", "size": "gpu"})


def train_spans(seeds: list[int], data_dir: str | None, store: ResultsStore, steps: int, smoke: bool = False,
                variants: list[str] | None = None) -> None:
    data = _data(data_dir, {"tokenizer": "word", "max_vocab": 8192})
    run_grid(_pick(spans_variants(data.vocab_size, steps, smoke), variants), seeds, data, store=store,
             tags={"experiment": "spans", "size": "gpu-heads"})


def summary(store: ResultsStore, out: Path) -> None:
    """Summarise every LS ("gpu") and spans ("gpu-heads") run in the store — replay only, nothing trains.

    Writes ``ls_gpu.json`` and ``spans_gpu_heads.json`` with their per-seed tables beside them
    (:func:`spanviz.experiments.save_sweep`): paired t-tests over seeds, Holm-corrected within each sweep.
    """
    records = [store.load(key) for key in store.list()]
    ls = [r for r in records if r.config.get("tags") == {"experiment": "ls", "size": "gpu"}]
    sp = [r for r in records if r.config.get("tags") == {"experiment": "spans", "size": "gpu-heads"}]
    out.mkdir(parents=True, exist_ok=True)
    if ls:
        n_local = next(r.config["model"]["n_local"] for r in ls if r.config.get("variant") == "ls")
        result = {"experiment": "ls", "size": "gpu", **_provenance(ls), **summarize_ls(ls, n_local)}
        save_sweep(result, out / "ls_gpu.json", runs=False)
        print(result["verdict"])
    if sp:
        table = per_seed_table(sp, ["best_val_loss"], info=lambda r: {"n_head": r.config["model"]["n_head"]})
        present = {(row["variant"], row["seed"]) for row in table}
        comparisons = [{"group": "heads", "n_head": h, "d_head": 256 // h, "baseline": f"heads={h}/[1111]",
                        "variants": [f"heads={h}/[1111]", f"heads={h}/[1000]"], "metric": "best_val_loss"}
                       for h in SPANS_HEADS
                       if sum((f"heads={h}/[1000]", s) in present and (f"heads={h}/[1111]", s) in present
                              for s in {seed for _, seed in present}) >= 2]  # complete pairs only
        result = {"experiment": "spans", "size": "gpu-heads", **_provenance(sp), "comparisons": comparisons,
                  "rows": compare_groups(table, comparisons) if comparisons else [], "per_seed": table}
        save_sweep(result, out / "spans_gpu_heads.json", runs=False)
        for row in result["rows"]:
            print(row["variant"], row["n"], row["mean"], row.get("rel_change_pct"), row.get("p"), row["verdict"])


def _provenance(records: list) -> dict[str, Any]:
    """Where and how a group of runs was made: device, torch, configuration of the first run, data."""
    first = records[0]
    return {"device": first.environment.get("device_name"), "torch": first.environment.get("torch"),
            "started_utc": min(r.environment.get("started_utc", "") for r in records),
            "data": first.config["data"], "train": first.config["train"],
            "variants": sorted({r.config.get("variant") for r in records}),
            "seeds": sorted({r.config.get("seed") for r in records})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["ls", "spans", "summary"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--data-dir", default=None, help="WikiText-2 folder (else $SPANVIZ_WIKITEXT_DIR / the hub)")
    parser.add_argument("--spans-steps", type=int, default=SPANS_STEPS)
    parser.add_argument("--ls-steps", type=int, default=None, help="default: the sweep's size 'gpu' (2000)")
    parser.add_argument("--variants", nargs="+", default=None, metavar="NAME",
                        help="ls / spans: train only these variants (e.g. mhsa, or 'heads=4/[1000]'); default all")
    parser.add_argument("--smoke", action="store_true", help="tiny CPU rehearsal of the same code paths")
    parser.add_argument("--out", type=Path, default=Path("."), help="summary: folder for the JSON and CSV files")
    args = parser.parse_args(argv)
    store = ResultsStore()
    if args.what == "ls":
        train_ls(args.seeds, args.data_dir, store, args.ls_steps, args.smoke, args.variants)
    elif args.what == "spans":
        train_spans(args.seeds, args.data_dir, store, args.spans_steps, args.smoke, args.variants)
    else:
        summary(store, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
