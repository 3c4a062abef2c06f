"""Training: :class:`TrainConfig`, the learning-rate schedule, :class:`Trainer` and :class:`RunRecord`.

A :class:`Trainer` trains one :class:`~spanviz.model.TinyGPT` on a :class:`~spanviz.data.TokenData` with AdamW,
step by step (``trainer.step(n)``) or to the end (``trainer.run()``). Everything a run produced lives in
``trainer.record`` (a :class:`RunRecord`: config, environment, history, status), saved as JSON;
``save_checkpoint`` / :meth:`Trainer.resume` continue a run exactly (bit for bit on CPU with the same thread
count).

The package, in reading order:

* :mod:`spanviz.train.loop` — :func:`~spanviz.train.loop.update` (one optimizer update: forward, backward, clip,
  step) and the :class:`Trainer` around it; step numbering, determinism and non-finite handling are described
  there;
* :mod:`spanviz.train.config` — :class:`TrainConfig`, :func:`lr_at` (warm-up, cosine, spike) and the checks of a
  run that need this machine (device, bf16, memory);
* :mod:`spanviz.train.callbacks` — what is measured and shown, kept out of the loop: :class:`Probe` (the
  techniques' probes), :class:`~spanviz.train.callbacks.ProbeSet`, :class:`~spanviz.train.callbacks.ProgressBar`;
* :mod:`spanviz.train.record` — :class:`RunRecord`, its JSON, the run config the results store keys by, and
  :func:`~spanviz.train.record.append_rows`, the one place a history grows;
* :mod:`spanviz.train.checkpoint` — checkpoint files of :meth:`Trainer.state_dict`: write atomically, read and
  check, continue a run from one (:meth:`Trainer.load_state_dict`);
* :mod:`spanviz.train.guards` — the run's private RNG stream, and stop requests and Ctrl-C kept to the boundaries
  between updates (:class:`~spanviz.train.guards.Interruption`, the context manager around the loop).
"""

from spanviz.files import atomic_write
from spanviz.train.callbacks import Probe, ProbeSet, ProgressBar, check_probes
from spanviz.train.checkpoint import (CHECKPOINT_FORMAT, CHECKPOINT_KEYS, Checkpoint, CheckpointError,
                                      load_checkpoint, nonfinite_parameter)
from spanviz.train.config import (DEVICE_TYPES, DTYPES, TrainConfig, available_memory, check_data, check_memory,
                                  check_runnable, count_parameters, default_warmup_steps, estimate_memory, lr_at,
                                  resolve_device)
from spanviz.train.loop import Trainer, update
from spanviz.train.record import (CONFIG_KEYS, CORE_KEYS, RECORD_FORMAT, STATUSES, RunRecord, append_rows,
                                  describe_probe, environment, run_config, to_json_text, to_json_value)

__all__ = [
    "CHECKPOINT_FORMAT", "CHECKPOINT_KEYS", "CONFIG_KEYS", "CORE_KEYS", "DEVICE_TYPES", "DTYPES", "RECORD_FORMAT",
    "STATUSES", "Checkpoint", "CheckpointError", "Probe", "ProbeSet", "ProgressBar", "RunRecord", "TrainConfig",
    "Trainer", "append_rows", "atomic_write", "available_memory", "check_data", "check_memory", "check_probes",
    "check_runnable", "count_parameters", "default_warmup_steps", "describe_probe", "environment", "estimate_memory",
    "load_checkpoint", "lr_at", "nonfinite_parameter", "resolve_device", "run_config", "to_json_text",
    "to_json_value", "update",
]
