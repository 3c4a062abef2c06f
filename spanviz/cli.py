"""The ``spanviz`` command: ``train``, ``sweep``, ``bench``, ``prepare-data``.

Examples::

    spanviz prepare-data --data-dir ../shared/data/wikitext-2 --train-split validation --eval-split test
    spanviz train --data-dir ../shared/data/wikitext-2 --train-split validation --eval-split test \\
        --steps 300 --out runs/demo
    spanviz train --spans-preset kv8 --alphas 1000 --out runs/kv8-1000
    spanviz train --n-local 3 --window 32 --qk-norm --out runs/ls
    spanviz sweep spans --seeds 3
    spanviz bench --json
    spanviz runs export workshop.zip      # then, on the students' machines: spanviz runs import workshop.zip

Data flags default to the environment: ``SPANVIZ_WIKITEXT_DIR`` (local folder), ``SPANVIZ_TRAIN_SPLIT`` and
``SPANVIZ_EVAL_SPLIT``; without them WikiText-2 comes from the Hugging Face hub.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

logger = logging.getLogger("spanviz")

SWEEPS = {
    "spans": ("spanviz.experiments.spans", "spans_sweep"),
    "ls": ("spanviz.experiments.ls", "ls_sweep"),
    "fp8": ("spanviz.experiments.fp8", "fp8_sweep"),
}


# --------------------------------------------------------------------------------------------- data
def add_data_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data (WikiText-2)")
    g.add_argument("--data-dir", default=os.environ.get("SPANVIZ_WIKITEXT_DIR"),
                   help="local folder with the splits (default: $SPANVIZ_WIKITEXT_DIR, else the HF hub)")
    g.add_argument("--train-split", default=os.environ.get("SPANVIZ_TRAIN_SPLIT", "train"),
                   help="split to train on (default: $SPANVIZ_TRAIN_SPLIT or train)")
    g.add_argument("--eval-split", default=os.environ.get("SPANVIZ_EVAL_SPLIT", "validation"),
                   help="split to evaluate on (default: $SPANVIZ_EVAL_SPLIT or validation)")
    g.add_argument("--wikitext-config", default="wikitext-2-v1", choices=["wikitext-2-v1", "wikitext-2-raw-v1"])
    g.add_argument("--tokenizer", default=None, choices=["word", "byte"],
                   help="word (default) or byte; `sweep ls` defaults to its size's choice (bytes on CPU)")
    g.add_argument("--max-vocab", type=int, default=8192, help="word-level vocabulary cap (0 = no cap)")
    g.add_argument("--offline", action="store_true", default=None, help="never contact the hub")


def load_data(args: argparse.Namespace):
    from spanviz.data import prepare_tokens

    tokenizer = args.tokenizer or "word"
    return prepare_tokens(
        data_dir=args.data_dir,
        config=args.wikitext_config,
        splits={"train": args.train_split, "eval": args.eval_split},
        tokenizer=tokenizer,
        max_vocab=(args.max_vocab or None) if tokenizer == "word" else None,
        offline=args.offline,
    )


def cmd_prepare_data(args: argparse.Namespace) -> int:
    data = load_data(args)
    info = data.describe()
    print(f"{'cache hit' if data.from_cache else 'tokenized'}: {info['n_tokens']['train']:,} train / "
          f"{info['n_tokens']['eval']:,} eval tokens, vocab {data.vocab_size:,}, splits {info['splits']}, "
          f"source {info['source']}")
    return 0


# -------------------------------------------------------------------------------------------- train
def add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--n-layer", type=int, default=2)
    g.add_argument("--n-head", type=int, default=4)
    g.add_argument("--d-model", type=int, default=128)
    g.add_argument("--context-length", type=int, default=128, help="T, tokens per training window")
    g.add_argument("--dropout", type=float, default=0.0)
    g.add_argument("--attn-backend", default="auto", choices=["auto", "explicit", "sdpa", "flex"])
    ls = p.add_argument_group("LS-attention (arXiv 2505.15548)")
    ls.add_argument("--n-local", type=int, default=0, help="number of local (sliding-window) heads")
    ls.add_argument("--window", type=int, default=None, help="p, keys a local head sees incl. itself")
    ls.add_argument("--qk-norm", action="store_true", help="normalise q and k per head (QK-norm)")
    sp = p.add_argument_group("span / violation gradient scaling (arXiv 2512.13033)")
    sp.add_argument("--spans-preset", default=None,
                    help="kv8 | qkv8 | qk4; span scaling is off unless this or --alphas is given")
    sp.add_argument("--alphas", default=None, help="α per order, e.g. 1000 or 1,0.5,0,0 (default 1111)")
    sp.add_argument("--spans-layers", default=None, help="comma-separated layer indices (default: all)")
    fp = p.add_argument_group("rank-aware FP8 bounds (arXiv 2602.18851)")
    fp.add_argument("--qk-rank", type=int, default=None, help="constrain each head's W^Q W^Kᵀ to rank r")
    fp.add_argument("--fp8-probe", action="store_true", help="record max logits, bounds, scales, overflows")
    pr = p.add_argument_group("probes (opt-in measurements written to the run record)")
    pr.add_argument("--logit-probe", action="store_true", help="max |q·k|/√d_head per layer and head")
    pr.add_argument("--spans-probe", action="store_true", help="energy share by order, cosines, angles")
    pr.add_argument("--probe-every", type=int, default=10, help="steps between probe measurements")


def add_train_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("training")
    g.add_argument("--steps", type=int, default=300)
    g.add_argument("--batch-size", type=int, default=16)
    g.add_argument("--lr", type=float, default=3e-3)
    g.add_argument("--warmup-steps", type=int, default=None, help="default: 10%% of --steps, at most 100")
    g.add_argument("--weight-decay", type=float, default=0.1)
    g.add_argument("--grad-clip", type=float, default=1.0)
    g.add_argument("--eval-interval", type=int, default=50)
    g.add_argument("--eval-iters", type=int, default=10)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--device", default="auto", help="auto | cpu | cuda | mps | cuda:N")
    g.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    g.add_argument("--lr-spike-factor", type=float, default=1.0, help="multiply the LR during a spike")
    g.add_argument("--lr-spike-start", type=int, default=0)
    g.add_argument("--lr-spike-steps", type=int, default=0)
    g.add_argument("--out", type=Path, default=None, help="folder for run.json and checkpoint.pt")
    g.add_argument("--resume", action="store_true", help="continue the run saved in --out")


def span_config_from_args(args: argparse.Namespace):
    if args.spans_preset is None and args.alphas is None:
        return None
    from spanviz.spans import SpanConfig

    layers = None if args.spans_layers is None else tuple(int(s) for s in args.spans_layers.split(","))
    alphas = args.alphas or "1111"
    alphas = alphas.split(",") if "," in alphas else alphas
    return SpanConfig(alphas=alphas, preset=args.spans_preset or "kv8", layers=layers)


def configs_from_args(args: argparse.Namespace, vocab_size: int):
    from spanviz.model import GPTConfig
    from spanviz.train import TrainConfig

    model_cfg = GPTConfig(
        vocab_size=vocab_size, context_length=args.context_length, n_layer=args.n_layer, n_head=args.n_head,
        d_model=args.d_model, dropout=args.dropout, n_local=args.n_local, window=args.window,
        qk_norm=args.qk_norm, qk_rank=args.qk_rank, spans=span_config_from_args(args),
        attn_backend=args.attn_backend,
    )
    train_cfg = TrainConfig(
        steps=args.steps, batch_size=args.batch_size, lr=args.lr,
        warmup_steps=args.warmup_steps if args.warmup_steps is not None else min(100, max(args.steps, 0) // 10),
        weight_decay=args.weight_decay, grad_clip=args.grad_clip, eval_interval=args.eval_interval,
        eval_iters=args.eval_iters, seed=args.seed, device=args.device, dtype=args.dtype,
        lr_spike_factor=args.lr_spike_factor, lr_spike_start=args.lr_spike_start,
        lr_spike_steps=args.lr_spike_steps,
    )
    return model_cfg, train_cfg


def probes_from_args(args: argparse.Namespace) -> list:
    probes = []
    if args.logit_probe:
        from spanviz.local_global import LogitProbe

        probes.append(LogitProbe(every=args.probe_every))
    if args.spans_probe:
        from spanviz.spans import SpanProbe

        probes.append(SpanProbe(every=args.probe_every))
    if args.fp8_probe:
        from spanviz.fp8 import FP8Probe

        probes.append(FP8Probe(every=1))
    return probes


def cmd_train(args: argparse.Namespace) -> int:
    from spanviz.train import Trainer

    # Validate every config field before loading data (fails in milliseconds, not after tokenizing).
    configs_from_args(args, vocab_size=1)
    data = load_data(args)
    model_cfg, train_cfg = configs_from_args(args, data.vocab_size)
    probes = probes_from_args(args)
    if args.resume:
        if args.out is None:
            raise ValueError("--resume needs --out, the folder holding checkpoint.pt")
        trainer = Trainer.resume(args.out / "checkpoint.pt", data, probes=probes, out_dir=args.out)
    else:
        trainer = Trainer(model_cfg, train_cfg, data, probes=probes, out_dir=args.out)
    remaining = trainer.train_cfg.steps - trainer.step_count
    with tqdm(total=trainer.train_cfg.steps, initial=trainer.step_count, desc="train", unit="step") as bar:
        def progress(tr, row):
            bar.update(1)
            postfix = {"loss": f"{row['train_loss']:.3f}"}
            if row.get("val_loss") is not None:
                postfix["val"] = f"{row['val_loss']:.3f}"
            bar.set_postfix(postfix)

        trainer.callbacks.append(progress)
        record = trainer.run() if remaining > 0 else trainer.record
    best = record.best_val_loss
    print(f"{record.status}: {trainer.step_count} steps, best val loss "
          f"{'n/a' if best is None else f'{best:.4f}'}" + (f" — {record.message}" if record.message else ""))
    if args.out is not None:
        print(f"run record: {args.out / 'run.json'}")
    return 0 if record.status in ("finished", "stopped") else 1


# -------------------------------------------------------------------------------------------- sweep
def parse_overrides(items: list[str] | None, flag: str, config_class: type) -> dict[str, Any]:
    """``["KEY=VALUE", ...]`` → ``{KEY: VALUE}`` for fields of ``config_class`` (a dataclass).

    VALUE is read as JSON when it parses (``1024``, ``0.01``, ``true``, ``null``), else kept as a string.
    Raises ValueError naming ``flag`` for an item without "=" or a KEY that is not a field of the class.
    """
    fields = {f.name for f in dataclasses.fields(config_class)}
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag} takes KEY=VALUE, got {item!r}")
        if key not in fields:
            raise ValueError(f"{flag}: {key!r} is not a {config_class.__name__} field; allowed: {sorted(fields)}")
        try:
            out[key] = json.loads(text)
        except json.JSONDecodeError:
            out[key] = text
    return out


def cmd_sweep(args: argparse.Namespace) -> int:
    module_name, func_name = SWEEPS[args.experiment]
    sweep = getattr(importlib.import_module(module_name), func_name)
    from spanviz.experiments import format_table
    from spanviz.model import GPTConfig
    from spanviz.store import ResultsStore
    from spanviz.train import TrainConfig

    model = parse_overrides(args.model, "--model", GPTConfig)
    train = parse_overrides(args.train, "--train", TrainConfig)
    if args.tokenizer is None and args.experiment == "ls":  # LS sizes choose their own tokenizer (bytes on CPU)
        from spanviz.experiments.ls import SIZES

        tokenizer = SIZES.get(args.size, SIZES["cpu"])["tokenizer"]
        args.tokenizer, args.max_vocab = tokenizer["tokenizer"], tokenizer["max_vocab"] or 0
    data = load_data(args)
    kwargs = dict(size=args.size, seeds=args.seeds, steps=args.steps, data=data,
                  store=None if args.no_store else ResultsStore(), model=model or None, train=train or None)
    with tqdm(desc=f"sweep {args.experiment}", unit="run") as bar:
        def progress(done: int, total: int, label: str = "") -> None:
            bar.total = total
            bar.n = done
            bar.set_postfix_str(label)
            bar.refresh()

        result = sweep(progress=progress, **kwargs)
    rows = result["rows"] if isinstance(result, dict) else result
    print(format_table(rows))
    if isinstance(result, dict) and result.get("verdict"):
        print(result["verdict"])
    if args.out is not None:  # the summary, and the per-seed table beside it (.per_seed.json / .per_seed.csv)
        from spanviz.experiments import save_sweep

        print("results: " + ", ".join(str(path) for path in save_sweep(result, args.out)))
    return 0


# -------------------------------------------------------------------------------------------- bench
def cmd_bench(args: argparse.Namespace) -> int:
    from spanviz.bench import run_benchmarks

    results = run_benchmarks(only=args.only, device=args.device, data_dir=args.data_dir, quick=args.quick)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        from spanviz.bench import format_results

        print(format_results(results))
    return 0


# --------------------------------------------------------------------------------------------- runs
def cmd_runs(args: argparse.Namespace) -> int:
    from spanviz.store import ResultsStore

    store = ResultsStore(args.store)
    if args.action == "list":
        for key in store.list():
            record = store.load(key)
            cfg = record.config
            print(f"{key[:12]}  {record.status:9s}  {cfg.get('variant', '-')!s:24s}  seed {cfg.get('seed', '-')}  "
                  f"best val {record.best_val_loss if record.best_val_loss is not None else 'n/a'}")
        print(f"{len(store.list())} runs in {store.root}")
    elif args.action == "export":
        if args.file is None:
            raise ValueError("runs export needs a FILE to write, e.g. spanviz runs export workshop.zip")
        path = store.export(args.file)
        print(f"exported {len(store.list())} runs to {path}")
    else:
        if args.file is None:
            raise ValueError("runs import needs a FILE to read, e.g. spanviz runs import workshop.zip")
        keys = store.import_(args.file, overwrite=args.overwrite)
        print(f"imported {len(keys)} runs into {store.root}")
    return 0


# --------------------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spanviz", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("prepare-data", help="download/read WikiText-2 and cache token ids")
    add_data_args(p)
    p.set_defaults(func=cmd_prepare_data)

    p = sub.add_parser("train", help="train a TinyGPT and write a run record")
    add_data_args(p)
    add_model_args(p)
    add_train_args(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("sweep", help="run a named experiment over seeds and print a table")
    p.add_argument("experiment", choices=sorted(SWEEPS))
    p.add_argument("--size", default="cpu", help="cpu (minutes on 2 cores) or gpu / paper (bigger)")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--steps", type=int, default=None, help="override the experiment's step count")
    p.add_argument("--no-store", action="store_true", help="retrain even if the results store has the run")
    p.add_argument("--out", type=Path, default=None,
                   help="write the results as JSON here (a .json path), with the per-seed table beside it")
    p.add_argument("--model", action="append", metavar="KEY=VALUE",
                   help="GPTConfig override for every variant, repeatable (e.g. --model context_length=1024)")
    p.add_argument("--train", action="append", metavar="KEY=VALUE",
                   help="TrainConfig override for every variant, repeatable (e.g. --train batch_size=4)")
    add_data_args(p)
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("runs", help="list, export or import the results store (instant replays)")
    p.add_argument("action", choices=["list", "export", "import"])
    p.add_argument("file", nargs="?", type=Path, default=None, help="the archive to write or read (.zip)")
    p.add_argument("--store", type=Path, default=None, help="store folder (default: $SPANVIZ_HOME/runs)")
    p.add_argument("--overwrite", action="store_true", help="import: replace runs already in the store")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("bench", help="benchmarks (ratios measured within one run)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--only", default=None, help="comma-separated: core,spans,ls,fp8,widgets,notebooks")
    p.add_argument("--device", default="auto")
    p.add_argument("--quick", action="store_true", help="fewer repeats (noisier)")
    p.add_argument("--data-dir", default=os.environ.get("SPANVIZ_WIKITEXT_DIR"))
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except (ValueError, ConnectionError) as exc:  # bad input, or WikiText-2 unreachable (HubUnavailableError)
        print(f"spanviz {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
