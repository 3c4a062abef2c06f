"""Training: :class:`TrainConfig`, the learning-rate schedule, :class:`Trainer` and :class:`RunRecord`.

A :class:`Trainer` trains one :class:`~spanviz.model.TinyGPT` on a :class:`~spanviz.data.TokenData` with AdamW,
step by step (``trainer.step(n)``) or to the end (``trainer.run()``). Everything a run produced lives in
``trainer.record`` (a :class:`RunRecord`: config, environment, history, status), saved as JSON;
``save_checkpoint`` / :meth:`Trainer.resume` continue a run exactly (bit for bit on CPU with the same thread
count).

The package exports what a notebook or script names (:class:`TrainConfig`, :class:`Trainer`, :class:`RunRecord`);
everything else is imported from its module. The package, in reading order:

* :mod:`spanviz.train.loop` — :func:`~spanviz.train.loop.update` (one optimizer update: forward, backward, clip,
  step) and the :class:`Trainer` around it; step numbering, determinism and non-finite handling are described
  there;
* :mod:`spanviz.train.config` — :class:`TrainConfig`, :func:`lr_at` (warm-up, cosine, spike) and the checks of a
  run that need this machine (device, bf16, memory);
* :mod:`spanviz.train.callbacks` — what is measured and shown, kept out of the loop:
  :class:`~spanviz.train.callbacks.ProbeSet` (runs the techniques' probes),
  :class:`~spanviz.train.callbacks.ProgressBar`;
* :mod:`spanviz.train.protocols` — what plugs into the trainer: the :class:`~spanviz.train.protocols.Probe` protocol
  and the :class:`~spanviz.train.protocols.TrainerView` a probe reads;
* :mod:`spanviz.train.record` — :class:`RunRecord`, its JSON, the run config the results store keys by, and
  :func:`~spanviz.train.record.append_rows`, the one place a history grows;
* :mod:`spanviz.train.checkpoint` — checkpoint files of plain state (:meth:`Trainer.state_dict`): write atomically,
  read and check (:func:`~spanviz.train.checkpoint.load_checkpoint`); it knows no trainer;
* :mod:`spanviz.train.folder` — :class:`~spanviz.train.folder.RunFolder`, a run's ``run.json`` and
  ``checkpoint.pt``;
* :mod:`spanviz.train.guards` — the run's private RNG stream, and stop requests and Ctrl-C kept to the boundaries
  between updates (:class:`~spanviz.train.guards.Interruption`, the context manager around the loop).

Inside the package imports run one way, without a circle: ``config``, ``guards`` → ``protocols`` → ``record`` →
``callbacks``, ``checkpoint`` → ``folder`` → ``loop``.
"""

from spanviz.train.config import TrainConfig
from spanviz.train.loop import Trainer
from spanviz.train.record import RunRecord

__all__ = ["RunRecord", "TrainConfig", "Trainer"]
