"""``spanviz train``'s plans, made before any data are read: the configs of a new run from the flags
(:mod:`spanviz.cli.train_flags`), the smoke version, and for ``--resume`` the saved run and the typed flags that
would contradict it (``--config FILE`` as flags: :mod:`spanviz.cli.config_file`)."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from spanviz.cli.common import UsageError, as_flags, data_settings, estimated_vocab, flag_name, shrink
from spanviz.cli.train_flags import ProbeOptions, TrainCommand
from spanviz.data.hub import HUB_ID
from spanviz.data.tokens import LOCAL_SOURCE
from spanviz.fp8 import FP8Probe
from spanviz.local_global import LogitProbe
from spanviz.model import GPTConfig
from spanviz.settings import resolve_data_source
from spanviz.spans import SpanConfig, SpanProbe
from spanviz.train import RunRecord, TrainConfig
from spanviz.train.checkpoint import load_checkpoint
from spanviz.train.record import describe_probe, to_json_text


def smoke_train(cmd: TrainCommand, explicit: Collection[str] = ()) -> TrainCommand:
    """The seconds-long version of a train command: step counts ÷ 100, context ≤ 32, batch ≤ 4, ≤ 2 eval batches.

    ``explicit``: the flags typed or set by ``--config`` (a warm-up not set is the default's share of the new
    number of steps, not the resolved one of the full run)."""
    t = cmd.train
    steps = shrink(t.steps, 2)
    warmup = t.warmup_steps if "--warmup-steps" in explicit else None
    spike = t.lr_spike_factor != 1.0
    train = replace(t, steps=steps, eval_interval=shrink(t.eval_interval), eval_iters=min(t.eval_iters, 2),
                    batch_size=min(t.batch_size, 4), warmup_steps=shrink(warmup, 0) if warmup else warmup,
                    lr_spike_start=min(shrink(t.lr_spike_start, 0), steps - 1) if spike else 0,
                    lr_spike_steps=shrink(t.lr_spike_steps, 0) if spike else 0,
                    checkpoint_interval=shrink(t.checkpoint_interval) if t.checkpoint_interval else
                    t.checkpoint_interval)
    model = replace(cmd.model, context_length=min(cmd.model.context_length, 32))
    probes = cmd.probes
    if probes.logit_probe or probes.spans_probe:
        probes = replace(probes, probe_every=shrink(probes.probe_every))
    return replace(cmd, train=train, model=model, probes=probes)


@dataclass
class TrainPlan:
    """Everything ``spanviz train`` checked before loading data: configs, probes, data settings, resume state."""

    model_cfg: GPTConfig
    train_cfg: TrainConfig
    probes: ProbeOptions
    data: dict[str, Any]
    checkpoint: Any = None  # spanviz.train.Checkpoint when resuming
    notes: list[str] = field(default_factory=list)


def span_config(opts: Any) -> SpanConfig | None:
    """The SpanConfig of the span flags, or None when span scaling is off."""
    if opts.spans_preset is None and opts.alphas is None:
        if opts.spans_layers is not None:
            raise UsageError(f"--spans-layers {' '.join(map(str, opts.spans_layers))}: has no effect without "
                             "--spans-preset or --alphas (span scaling is off)")
        return None
    try:
        return SpanConfig(preset=opts.spans_preset or "kv8", alphas="1111" if opts.alphas is None else opts.alphas,
                          layers=opts.spans_layers)
    except ValueError as error:
        raise UsageError(as_flags(str(error))) from None


def build_probes(opts: ProbeOptions) -> list:
    """The probe objects of the probe flags (validated)."""
    if opts.probe_every < 1:
        raise UsageError(f"--probe-every {opts.probe_every}: must be an integer >= 1")
    if opts.probe_every != ProbeOptions.probe_every and not (opts.logit_probe or opts.spans_probe):
        raise UsageError(f"--probe-every {opts.probe_every}: applies to --logit-probe and --spans-probe, and neither "
                         "is on (--fp8-probe measures every update)")
    probes = []
    if opts.logit_probe:
        probes.append(LogitProbe(every=opts.probe_every))
    if opts.spans_probe:
        probes.append(SpanProbe(every=opts.probe_every))
    if opts.fp8_probe:
        probes.append(FP8Probe(every=1))
    return probes


def model_config(cmd: TrainCommand, vocab_size: int) -> GPTConfig:
    """The GPTConfig of the model and span flags, with ``vocab_size``.

    Raises:
        UsageError: --window without --n-local or --global-every, --fp8-probe with --qk-norm, span settings the model refuses.
    """
    opts = cmd.model
    if opts.window is not None and opts.n_local == 0 and opts.global_every is None:
        raise UsageError(f"--window {opts.window}: has no effect without --n-local (the number of local heads) or "
                         "--global-every (local layers); add --n-local N")
    if cmd.probes.fp8_probe and opts.qk_norm:
        raise UsageError("--fp8-probe with --qk-norm: the FP8 bounds are for plain q·k logits, which QK-norm replaces; "
                         "drop one of them")
    try:
        return replace(opts, vocab_size=vocab_size, spans=span_config(cmd.spans))
    except ValueError as error:  # e.g. span layers beyond --n-layer, checked with the model
        raise UsageError(as_flags(str(error))) from None


def _given(given: Collection[str], options: Any) -> dict[str, str]:
    """Option field → flag, for the fields of ``options`` whose flag was typed."""
    return {f.name: flag_name(f.name) for f in fields(options) if flag_name(f.name) in given}


def resume_plan(cmd: TrainCommand, given: Mapping[str, str], out: Path) -> TrainPlan:
    """Checks for ``--resume``: the checkpoint in ``out``, and typed flags that would contradict it.

    The run continues with its saved configuration (model, training, probes, data); only ``--steps`` may
    change (to extend it). A typed flag with the saved value is fine; another value is an error.
    """
    if cmd.config is not None:
        raise UsageError("--config with --resume: a resumed run keeps its saved configuration; drop --config")
    refuse_flags_without_effect(cmd, given)
    path = out / "checkpoint.pt"
    if not path.exists():
        hint = ""
        if (out / "run.json").is_file():
            hint = " (the run stopped before its first checkpoint: start it again, without --resume)"
        raise UsageError(f"--resume: {out} has no checkpoint.pt to continue{hint}")
    checkpoint = load_checkpoint(path)  # CheckpointError: one line naming the file
    saved_model, saved_train = checkpoint.model_cfg, checkpoint.train_cfg
    try:  # a missing or unreadable run.json: no status
        diverged = RunRecord.load(out / "run.json").status == "diverged"
    except ValueError:
        diverged = False
    if diverged:
        raise UsageError(f"--resume: the run in {out} diverged (see its run.json); continuing it from its last good "
                         "checkpoint would diverge again at the same update. Start a new run, e.g. with a lower --lr")
    conflicts = []
    for option, flag in _given(given, cmd.model).items():
        if getattr(cmd.model, option) != getattr(saved_model, option):
            conflicts.append(f"{flag} (the run has {option}={getattr(saved_model, option)})")
    if _given(given, cmd.spans) and span_config(cmd.spans) != saved_model.spans:
        conflicts.append(f"{'/'.join(_given(given, cmd.spans).values())} (the run has spans={saved_model.spans})")
    for option, flag in _given(given, cmd.train).items():
        if option != "steps" and getattr(cmd.train, option) != getattr(saved_train, option):
            conflicts.append(f"{flag} (the run has {option}={getattr(saved_train, option)})")
    saved_probes = probe_options_of(checkpoint.record.config.get("probes", []), path)
    for option, flag in _given(given, cmd.probes).items():
        if getattr(cmd.probes, option) != getattr(saved_probes, option):
            conflicts.append(f"{flag} (the run has {option}={getattr(saved_probes, option)})")
    if conflicts:
        raise UsageError(f"--resume continues the run saved in {out} with its own settings; only --steps may change. "
                         f"These flags differ from it: {'; '.join(conflicts)}")
    steps = saved_train.steps
    if "--steps" in given:
        steps = cmd.train.steps
        if steps < checkpoint.step:
            raise UsageError(f"--steps {steps}: the run in {out} has already done {checkpoint.step} updates; "
                             f"give --steps {checkpoint.step} or more")
    notes = []
    if steps > saved_train.steps and saved_train.min_lr_ratio != 1.0:
        notes.append(f"note: extending {saved_train.steps} to {steps} updates; the updates still to do follow the "
                     f"learning-rate schedule of a {steps}-update run (the cosine decays over the new total), so the "
                     "curve differs from a fresh run of that length unless the schedule ignores the total "
                     "(--min-lr-ratio 1)")
    data = resume_data_settings(cmd, given, checkpoint.record.config.get("data", {}))
    return TrainPlan(saved_model, replace(saved_train, steps=steps), saved_probes, data, checkpoint, notes)


def probe_options_of(saved: Sequence[Mapping[str, Any]], where: Path, what: str = "--resume") -> ProbeOptions:
    """The probe flags that reproduce a run's saved probes (``config["probes"]``).

    Raises:
        UsageError: (starting with ``what``) probes the flags cannot reproduce (set from Python).
    """
    kinds = {p.get("type"): p for p in saved if isinstance(p, Mapping)}
    every = {p.get("every") for t, p in kinds.items() if t in ("LogitProbe", "SpanProbe")}
    opts = ProbeOptions(logit_probe="LogitProbe" in kinds, spans_probe="SpanProbe" in kinds,
                        fp8_probe="FP8Probe" in kinds,
                        probe_every=every.pop() if len(every) == 1 else ProbeOptions.probe_every)
    described = json.loads(to_json_text([describe_probe(p) for p in build_probes(opts)]))
    if described != list(saved):
        advice = ("continue it from Python (spanviz.train.Trainer.resume)" if what == "--resume"
                  else "train it from Python (spanviz.train.Trainer)")
        raise UsageError(f"{what}: the probes of the run in {where} were not set with spanviz train's probe flags; "
                         f"{advice}")
    return opts


def resume_data_settings(cmd: TrainCommand, given: Collection[str], saved: Mapping[str, Any]) -> dict[str, Any]:
    """prepare_tokens arguments that read the same data as the saved run (typed data flags must agree)."""
    source = saved.get("source")
    folder = str(cmd.data.data_dir) if cmd.data.data_dir is not None else None
    if folder is None and source and source != HUB_ID:
        if source != LOCAL_SOURCE and Path(source).is_dir():
            folder = source  # a record from before spanviz stopped recording the folder
        else:  # the record names no folder: $SPANVIZ_WIKITEXT_DIR or the remembered one (its text is checked)
            folder, _ = resolve_data_source()
        if folder is None:
            raise UsageError("--resume: the run read WikiText-2 from a local folder; give it with --data-dir "
                             "(its text is checked against the run's)")
    splits = saved.get("splits") or {}
    opts = replace(cmd.data, data_dir=folder and Path(folder),
                   train_split=cmd.data.train_split if "--train-split" in given else splits.get("train"),
                   eval_split=cmd.data.eval_split if "--eval-split" in given else splits.get("eval"),
                   wikitext_config=saved.get("config", cmd.data.wikitext_config) if "--wikitext-config" not in given
                   else cmd.data.wikitext_config)
    tokenizer = cmd.data.tokenizer if "--tokenizer" in given else saved.get("tokenizer")
    max_vocab = cmd.data.max_vocab if "--max-vocab" in given else (saved.get("max_vocab") or 0)
    return data_settings(opts, tokenizer=tokenizer, max_vocab=max_vocab, given=given)


def refuse_flags_without_effect(cmd: TrainCommand, given: Mapping[str, str]) -> None:
    """Typed flags that would change nothing are refused (the README's promise), rather than accepted silently.

    ``given``: typed flag → its value as typed (TrainConfig sets the spike's start and length to 0 without a spike).
    """
    t = cmd.train
    if t.lr_spike_factor == 1.0:
        for flag in ("--lr-spike-start", "--lr-spike-steps"):
            if flag in given:
                raise UsageError(f"{flag} {given[flag]}: has no effect without --lr-spike-factor (at factor 1 there is "
                                 "no spike); add --lr-spike-factor F (> 1)")
    if "--checkpoint-interval" in given and cmd.out is None:
        raise UsageError(f"--checkpoint-interval {t.checkpoint_interval}: checkpoints are written only into --out "
                         "DIR, and none is given; add --out DIR")


def fresh_plan(cmd: TrainCommand, given: Mapping[str, str] | None = None) -> TrainPlan:
    """Checks for a new run: flags without effect, the data settings, the model config (with an estimated
    vocabulary), the probes. (tyro built the model and training configs, which validate themselves.)"""
    given = given or {}
    refuse_flags_without_effect(cmd, given)
    settings = data_settings(cmd.data, given=given)
    model_cfg = model_config(cmd, estimated_vocab(settings))
    build_probes(cmd.probes)
    return TrainPlan(model_cfg, cmd.train, cmd.probes, settings)
