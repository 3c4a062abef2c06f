"""``spanviz train``: its flags (GPTConfig, TrainConfig, the data, span and probe flags), then lock ``--out``,
train with a progress bar, print the outcome, put the run into the store. The flags are
:mod:`spanviz.cli.train_flags`, the plans made from them before any data are read :mod:`spanviz.cli.train_plans`."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from spanviz.cli.common import UsageError, announce_smoke, as_flags, check_home, load_data, smoke
from spanviz.cli.config_file import ConfigFile
from spanviz.cli.train_flags import TrainCommand
from spanviz.cli.train_plans import TrainPlan, build_probes, fresh_plan, resume_plan, smoke_train
from spanviz.contexts import torch_threads
from spanviz.files import check_writable_folder, folder_lock
from spanviz.model import GPTConfig
from spanviz.store import ResultsStore
from spanviz.train import RunRecord, Trainer
from spanviz.train.callbacks import ProgressBar
from spanviz.train.config import check_runnable, count_parameters

DATA_FLAGS = ("--data-dir", "--train-split", "--eval-split", "--wikitext-config", "--tokenizer", "--max-vocab")
"""The flags that choose the data (typed with ``--config run.json``: other data on purpose)."""
SAME_DATA = ("config", "splits", "tokenizer", "max_vocab", "vocab_size", "text_sha256")
"""What must agree between a ``--config run.json`` and the data read for the new run (the folder may differ)."""


def cmd_train(cmd: TrainCommand, given: Mapping[str, str], config: ConfigFile | None = None) -> int:
    """``spanviz train``; returns 0 (finished), 1 (diverged, or the store could not keep it) or 130 (Ctrl-C).

    Args:
        given: the typed flags (→ their values as typed).
        config: what ``--config FILE`` gave; the data read must match a run.json's unless a data flag was typed.
    Raises:
        UsageError: any flag or folder that cannot work, before the data are read where that can be known.
    """
    config_data = config.data if config is not None else None
    if smoke():
        cmd = smoke_train(cmd, {*given, *(config.flags if config is not None else ())})
        announce_smoke(f"a seconds-long run ({cmd.train.steps} updates, context {cmd.model.context_length}, "
                        f"batch {cmd.train.batch_size})")
    if cmd.resume and cmd.out is None:
        raise UsageError("--resume needs --out, the folder of the run to continue")
    if cmd.resume and not cmd.out.is_dir():
        raise UsageError(f"--resume --out {cmd.out}: there is no such folder (nothing to continue)")
    plan = None if cmd.resume else fresh_plan(cmd, given)
    if plan is not None:
        check_runnable(plan.model_cfg, plan.train_cfg)  # device, bf16, FlexAttention, memory
    if cmd.store or cmd.out is None:
        check_home()
    with ExitStack() as stack:
        if cmd.out is not None:
            need = 3 * checkpoint_bytes(plan.model_cfg) if plan is not None else 0
            out = check_writable_folder(cmd.out, f"--out {cmd.out}", need_bytes=need)
            stack.enter_context(folder_lock(out, f"--out {cmd.out}"))
            if cmd.resume:
                plan = resume_plan(cmd, given, out)
                check_runnable(plan.model_cfg, plan.train_cfg)
                stack.enter_context(torch_threads(saved_threads(plan)))
                need = 3 * checkpoint_bytes(plan.model_cfg)
                check_writable_folder(out, f"--out {cmd.out}", need_bytes=need)
            else:
                check_out_is_free(out)
        if cmd.store:  # the record must fit where it goes: found now, not after every update has run
            store = ResultsStore()
            store.check_room([plan.train_cfg.steps], what=f"the results store {store.root} (or train with --out DIR "
                                                          "--no-store)")
        if not cmd.store and cmd.out is None:
            print("note: with neither --out nor the results store, nothing of this run is kept", file=sys.stderr)
        for note in plan.notes:
            print(note, file=sys.stderr)
        data = load_data(plan.data)
        if config_data is not None and not (set(given) & set(DATA_FLAGS)):
            check_same_data(cmd, config_data, data.describe())
        return train_and_report(cmd, plan, data)


def saved_threads(plan: TrainPlan) -> int | None:
    """The torch threads the run's updates used, to continue it with the same count (on CPU the curve continues bit
    for bit only then); None to keep this process's count. Prints a note when it changes the count."""
    saved = plan.checkpoint.record.environment.get("num_threads") if plan.checkpoint is not None else None
    changes = plan.checkpoint.record.environment.get("num_threads_changes") if plan.checkpoint is not None else None
    if isinstance(changes, list) and changes and isinstance(changes[-1], list) and len(changes[-1]) == 2:
        saved = changes[-1][1]
    if isinstance(saved, bool) or not isinstance(saved, int) or saved < 1 or saved == torch.get_num_threads():
        return None
    print(f"note: continuing with the run's {saved} torch threads (this process has {torch.get_num_threads()}): on "
          "CPU the curve continues bit for bit only with the same count", file=sys.stderr)
    return saved


def check_same_data(cmd: TrainCommand, saved: dict[str, Any], now: dict[str, Any]) -> None:
    """``--config run.json`` reproduces the run's data: refuse other data read without a data flag saying so."""
    different = [k for k in SAME_DATA if k in saved and saved.get(k) != now.get(k)]
    if different:
        raise UsageError(f"--config {cmd.config}: the run was trained on other data than these ({', '.join(different)} "
                         f"differ; it read {saved.get('source')}, this run {now.get('source')}); give its data with "
                         "--data-dir, or set a data flag (--data-dir, --train-split, --tokenizer, ...) to train on "
                         "other data on purpose")


def train_and_report(cmd: TrainCommand, plan: TrainPlan, data: Any) -> int:
    """Build the trainer (fresh or resumed), train with a progress bar, store the record, print where it is."""
    probes = build_probes(plan.probes)
    if plan.checkpoint is not None:
        saved = {k: v for k, v in plan.checkpoint.record.config.get("data", {}).items() if k != "source"}
        now = {k: v for k, v in data.describe().items() if k != "source"}
        if saved != now:
            different = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
            raise UsageError(f"--resume: these data differ from the run's ({', '.join(different)}); give the "
                             "same --data-dir / split / tokenizer flags as the run")
        trainer = Trainer.resume(plan.checkpoint, data, probes=probes, out_dir=cmd.out, steps=plan.train_cfg.steps)
    else:
        model_cfg = replace(plan.model_cfg, vocab_size=data.vocab_size)
        trainer = Trainer(model_cfg, plan.train_cfg, data, probes=probes, out_dir=cmd.out)
    total = trainer.train_cfg.steps
    with ProgressBar(trainer, desc="train") as bar:
        try:
            record = trainer.run(progress=bar)
        except KeyboardInterrupt:
            where = (f"; continue with: spanviz train --resume --out {cmd.out}" if cmd.out is not None
                     and trainer.last_checkpoint is not None else "")
            print(f"interrupted after {trainer.step_count} of {total} updates{where}", file=sys.stderr)
            return 130
        except OSError as error:
            kept = (f"; checkpoint.pt holds {trainer.last_checkpoint} updates" if trainer.last_checkpoint is not None
                    else "")
            raise UsageError(f"could not write to --out {cmd.out}: {error.strerror or error}{kept}") from None
    return report(cmd, trainer, record)


def report(cmd: TrainCommand, trainer: Any, record: Any) -> int:
    """Print the outcome (one line), where it is on disk, and put it into the results store."""
    steps = trainer.train_cfg.steps
    if record.status == "finished":
        best = record.best_val_loss
        print(f"finished: {trainer.step_count} of {steps} updates, best val loss "
              f"{'n/a' if best is None else f'{best:.4f}'}")
    elif record.status == "diverged":
        print(f"diverged after {trainer.step_count} of {steps} updates: "
              f"{as_flags(record.message.removeprefix('diverged: '))}")
    else:
        print(f"{record.status}: {trainer.step_count} of {steps} updates. {record.message}")
    if cmd.out is not None:
        on_disk = f"run record: {cmd.out / 'run.json'}"
        if trainer.last_checkpoint is not None:
            on_disk += f"; checkpoint ({trainer.last_checkpoint} updates done): {cmd.out / 'checkpoint.pt'}"
        print(on_disk)
    if cmd.store and record.status in ("finished", "diverged"):
        store = ResultsStore()
        try:
            key = store.put(record)
        except (OSError, ValueError) as error:
            why = error.strerror or error if isinstance(error, OSError) else error
            if cmd.out is None:  # the store was the only place for this run: it is lost, so say so and fail
                print(f"spanviz train: error: the run could not be put into the results store {store.root} ({why}), "
                      "and without --out it is kept nowhere; free space there or give --out DIR, and train again",
                      file=sys.stderr)
                return 1
            print(f"warning: could not put the run into the results store {store.root}: {why} (it is kept in "
                  f"{cmd.out})", file=sys.stderr)
        else:
            stored = store.get(record.config)
            if stored is not None and stored.status != record.status:
                print(f"results store: kept the {stored.status} run {key[:12]} already in {store.root}; this "
                      f"{record.status} run of the same configuration does not replace it", file=sys.stderr)
            else:
                print(f"results store: {key[:12]} in {store.root}")
    return 0 if record.status == "finished" else 1


def check_out_is_free(out: Path) -> None:
    """A new run must not overwrite one already in ``out`` (nothing the user produced is lost)."""
    present = [name for name in ("run.json", "checkpoint.pt") if (out / name).exists()]
    if not present:
        return
    what = ""
    if (out / "run.json").is_file():
        try:
            saved = RunRecord.load(out / "run.json")
        except ValueError:
            what = " (its run.json is damaged)"
        else:
            done = len(saved.history.get("step", []))
            if done == 0 and present == ["run.json"]:
                return  # a run stopped before its first update: nothing to lose, start it afresh
            what = f" (status {saved.status}, {done} of {saved.config.get('train', {}).get('steps', '?')} updates)"
    raise UsageError(f"--out {out} already holds a run{what}: continue it with --resume (--resume --steps N "
                     "extends it), or choose another --out")


def checkpoint_bytes(model_cfg: GPTConfig) -> int:
    """About how large checkpoint.pt gets: weights and the two AdamW moments in fp32, plus slack."""
    return 12 * count_parameters(model_cfg) + 2**20
