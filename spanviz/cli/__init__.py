"""The ``spanviz`` command: ``prepare-data``, ``train``, ``sweep``, ``runs``, ``bench`` (also ``python -m spanviz``).

Examples::

    spanviz prepare-data --data-dir ~/data/wikitext-2 --train-split validation --eval-split test
    spanviz train --steps 300 --out runs/demo          # reads the folder prepare-data remembered
    spanviz train --resume --out runs/demo --steps 600 # after Ctrl-C, kill -9, or to extend a finished run
    spanviz train --spans-preset kv8 --alphas 1000 --out runs/kv8-1000
    spanviz train --config runs/demo/run.json --lr 1e-3 --out runs/lower-lr
    spanviz sweep ls --steps 300 --model context_length=1024 --train batch_size=4
    spanviz runs export workshop.zip      # then, on the students' machines: spanviz runs import workshop.zip

One source of truth: the model, span and training flags are generated (with ``tyro``) from the fields of
:class:`~spanviz.model.GPTConfig`, :class:`~spanviz.spans.SpanConfig` and :class:`~spanviz.train.TrainConfig`
— names, types, defaults and help (from the dataclasses' docstrings) — and validated by constructing those
classes. ``--config FILE`` (a JSON object with ``model`` / ``train`` sections, or a ``run.json``) sets the
defaults that flags then override; the sweep's ``--model KEY=VALUE`` / ``--train KEY=VALUE`` overrides are
parsed by the same generated classes.

Every argument is checked before any data is loaded or any model is built (:func:`fresh_plan`,
:func:`resume_plan`, :func:`cmd_sweep`); errors are one line naming the flag, the value and what is allowed.
``spanviz train`` never loses a run: it locks ``--out``, checks that ``--out`` and ``$SPANVIZ_HOME`` can be
written, checkpoints at every evaluation, and ``--resume`` continues the same curve after any interruption.

``SPANVIZ_SMOKE=1`` runs a seconds-long version of any command (for CI: steps ÷ 100, context ≤ 32, batch ≤ 4,
at most 2 evaluation batches and 2 seeds, the quick core step-ratio benchmark); the command says so on stderr.
"""

from spanviz.cli.bench import cmd_bench
from spanviz.cli.common import (
    SMOKE_ENV, announce_smoke, check_home, cmd_prepare_data, data_message, data_settings, estimated_vocab, load_data,
    smoke,
)
from spanviz.cli.main import given_flags, main, parse
from spanviz.cli.options import (
    COMMANDS, SWEEP_MODULES, BenchCommand, DataOptions, ModelOptions, ModelOverrides, PrepareDataCommand, ProbeOptions,
    RunsCommand, SpanOptions, SweepCommand, TrainCommand, TrainOptions, TrainOverrides, UsageError, as_flags,
    config_from, config_kwargs, field_help, options_from, tyro_message,
)
from spanviz.cli.plans import (
    TrainPlan, build_probes, check_out_is_free, checkpoint_bytes, fresh_plan, model_config, probe_options_of,
    resume_data_settings, resume_plan, smoke_train, span_config,
)
from spanviz.cli.runs import cmd_runs
from spanviz.cli.sweep import (
    EXPERIMENTS, cmd_sweep, parse_overrides, print_sweep, run_sweep, sweep_executor, sweep_function, sweep_sizes,
    sweep_variants,
)
from spanviz.cli.train import cmd_train, report, train_and_report
from spanviz.files import check_writable_folder, folder_lock

__all__ = [
    "COMMANDS", "EXPERIMENTS", "SMOKE_ENV", "SWEEP_MODULES", "BenchCommand", "DataOptions", "ModelOptions",
    "ModelOverrides", "PrepareDataCommand", "ProbeOptions", "RunsCommand", "SpanOptions", "SweepCommand",
    "TrainCommand", "TrainOptions", "TrainOverrides", "TrainPlan", "UsageError", "announce_smoke", "as_flags",
    "build_probes", "check_home", "check_out_is_free", "check_writable_folder", "checkpoint_bytes", "cmd_bench",
    "cmd_prepare_data", "cmd_runs", "cmd_sweep", "cmd_train", "config_from", "config_kwargs", "data_message",
    "data_settings", "estimated_vocab", "field_help", "folder_lock", "fresh_plan", "given_flags", "load_data", "main",
    "model_config", "options_from", "parse", "parse_overrides", "print_sweep", "probe_options_of", "report",
    "resume_data_settings", "resume_plan", "run_sweep", "smoke", "smoke_train", "span_config", "sweep_executor",
    "sweep_function", "sweep_sizes", "sweep_variants", "train_and_report", "tyro_message",
]
