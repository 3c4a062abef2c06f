"""The training loop: :class:`Trainer` trains one :class:`~spanviz.model.TinyGPT` on a
:class:`~spanviz.data.TokenData` with AdamW. :func:`update` is one optimizer update — the part to read first.

The loop is step-wise, so a notebook UI can interleave work with drawing: ``trainer.step(n)`` runs ``n``
updates and returns their history rows; ``trainer.run()`` blocks until ``train_cfg.steps``. It knows nothing of
what is measured: probes and row callbacks do that (:mod:`spanviz.train.callbacks`), the history is grown by
:func:`~spanviz.train.record.append_rows`. It owns its run's lifecycle — when ``run.json`` and ``checkpoint.pt``
are written, what a stop, a divergence or a Ctrl-C records, how a resume continues — while the files themselves
are :class:`~spanviz.train.folder.RunFolder`'s and the checkpoint format (plain state in, plain state out) is
:mod:`spanviz.train.checkpoint`'s.

Each update appends one history row (:data:`~spanviz.train.record.CORE_KEYS` says what its entries mean).
Determinism: one ``seed`` controls the initial weights, the training batches and dropout, in streams of the
trainer's own (:mod:`spanviz.train.guards`); on CPU the same seed and thread count give the same loss curve bit
for bit, also across a resume from a checkpoint (:meth:`Trainer.state_dict` holds everything it needs).

Non-finite numbers: a non-finite training loss or gradient norm stops the run *before* the optimizer step
(the model keeps its last weights), a non-finite validation loss stops it after; status becomes
``"diverged"``, the offending row stays in the history, and no checkpoint is written from then on, so the
last good checkpoint stays on disk.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from spanviz.contexts import eval_mode, settle_vector_math
from spanviz.data.batches import get_batch, iter_eval_batches
from spanviz.memory import keep_freed_memory
from spanviz.model import GPTConfig, TinyGPT
from spanviz.train.callbacks import ProbeSet, ProgressBar
from spanviz.train.checkpoint import (
    CHECKPOINT_FORMAT,
    Checkpoint,
    CheckpointError,
    check_moments,
    check_state,
    first_line,
    load_checkpoint,
    nonfinite_parameter,
    resumed_configs,
    save_checkpoint,
)
from spanviz.train.config import TrainConfig, check_data, check_runnable, lr_at
from spanviz.train.folder import RunFolder
from spanviz.train.guards import Interruption, PrivateRNG
from spanviz.train.protocols import Probe
from spanviz.train.record import CORE_KEYS, RunRecord, append_rows, environment, note_threads, run_config, to_json_text
from spanviz.validators import check_int

logger = logging.getLogger(__name__)


def update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: Tensor, y: Tensor, lr: float,
           grad_clip: float | None, autocast: AbstractContextManager[Any] | None = None) -> tuple[float, float | None]:
    """One optimizer update on the batch ``(x, y)``, both (B, T) token ids: forward, backward, clip, step.

    Args:
        lr: the learning rate of this update (:func:`~spanviz.train.config.lr_at`). grad_clip: clip the global
            gradient L2 norm to this value (None = off). autocast: the context of the forward pass (bf16).
    Returns:
        ``(train_loss, grad_norm)``: the batch's loss before the update [nats] and the gradient norm before
        clipping (None when the loss is non-finite). A non-finite loss or gradient norm skips the step, so
        the weights stay as they were.
    """
    for group in optimizer.param_groups:
        group["lr"] = lr
    model.train()
    with autocast or nullcontext():
        _, loss = model(x, y, return_logits=False)  # (B, T) ids → mean cross-entropy, a scalar
    train_loss = loss.item()
    if not math.isfinite(train_loss):
        return train_loss, None  # stop before the backward pass: nothing to learn from
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    # ‖g‖ = sqrt(Σ_p ‖∂L/∂p‖²); if ‖g‖ > grad_clip every gradient is scaled by grad_clip / ‖g‖
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip or math.inf).item()
    if math.isfinite(grad_norm):
        optimizer.step()  # AdamW, decoupled weight decay on the ≥ 2-D parameters
        if getattr(model.cfg, "qk_clip", None) is not None:
            model.apply_qk_clip()  # QK-Clip: heads whose logits passed τ in this forward pass are scaled back
    return train_loss, grad_norm


class Trainer:
    """Trains a :class:`~spanviz.model.TinyGPT` with AdamW, step by step; keeps a :class:`RunRecord`.

    Args:
        model_cfg: the architecture (its ``context_length`` T is the training sequence length).
        train_cfg: optimizer, schedule, evaluation, device, seed.
        data: a :class:`spanviz.data.TokenData` (or anything with ``train_ids``, ``eval_ids`` — 1-D integer
            tensors —, ``vocab_size`` and ``describe()``). Batches come from :func:`spanviz.data.batches.get_batch`.
        probes: :class:`Probe` objects, run every ``probe.every`` updates.
        callbacks: ``cb(trainer, row)`` called after every update (also the diverged one), after probes and
            checkpoints; may call ``trainer.request_stop()``. Exceptions propagate.
        out_dir: folder for ``run.json`` and ``checkpoint.pt`` (a :class:`~spanviz.train.folder.RunFolder`; written
            when training starts, at every checkpoint and when the run ends); None = keep all in memory.
        extra_config: JSON-able entries added to ``record.config`` (e.g. ``{"variant": "qk4", "seed": 1}``);
            they are part of the results-store key.

    Attributes:
        model (TinyGPT, on ``device``), optimizer (AdamW), device, model_cfg, train_cfg, data, probes (tuple),
        callbacks (list; may be appended to), step_count (updates done), history (dict of lists, also
        ``record.history``), record (:class:`RunRecord`), eval_batches (the ``eval_iters`` fixed (x, y) pairs,
        (B, T) long), probe_batch (the first B consecutive windows of the eval split, (x, y), (B', T) long, B' <= B),
        out_dir (Path or None), folder (its :class:`~spanviz.train.folder.RunFolder`, or None), last_checkpoint
        (updates done in the checkpoint in ``out_dir``, or None).

    Raises:
        ValueError: bad configs, probes, callbacks or data (e.g. ``model_cfg.vocab_size`` smaller than the
            data's, ids shorter than T + 1), anything :func:`check_runnable` refuses (an unavailable device,
            bf16 or FlexAttention without CUDA, a run that does not fit in memory) — before any compute.

    Thread safety: only :meth:`request_stop` may be called from another thread while a step runs.
    """

    def __init__(self, model_cfg: GPTConfig, train_cfg: TrainConfig, data: Any, *, probes: Sequence[Probe] = (),
                 callbacks: Sequence[Callable[[Trainer, dict[str, Any]], None]] = (),
                 out_dir: str | os.PathLike[str] | None = None, extra_config: Mapping[str, Any] | None = None) -> None:
        self.device = check_runnable(model_cfg, train_cfg)
        check_data(data, model_cfg)
        keep_freed_memory()  # every step frees and re-allocates the same buffers: keep them mapped (once per process)
        settle_vector_math()  # MKL's first exp on one thread: else a run's first loss can vary by process (once)
        self._probe_set = ProbeSet(probes)
        self.probes = self._probe_set.probes
        self.callbacks = list(callbacks)
        for i, cb in enumerate(self.callbacks):
            if not callable(cb):
                raise ValueError(f"callbacks[{i}] must be callable as cb(trainer, row), got {cb!r}")
        self.model_cfg, self.train_cfg, self.data = model_cfg, train_cfg, data
        self.folder = RunFolder(out_dir) if out_dir is not None else None  # run.json and checkpoint.pt
        self.out_dir = self.folder.path if self.folder is not None else None
        config = run_config(model_cfg, train_cfg, data, self.probes, extra_config)

        # One seed: weights (CPU init, then moved), dropout (our own copy of torch's RNG), batches.
        self._rng = PrivateRNG(self.device)
        with self._rng.seeded(train_cfg.seed):
            self.model = TinyGPT(model_cfg).to(self.device)
        self._batch_gen = torch.Generator().manual_seed(train_cfg.seed)

        params = [p for p in self.model.parameters() if p.requires_grad]  # weight decay on the ≥ 2-D ones only
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": train_cfg.weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        self.optimizer = torch.optim.AdamW(groups, lr=lr_at(0, train_cfg), betas=(train_cfg.beta1, train_cfg.beta2))

        B, T = train_cfg.batch_size, model_cfg.context_length
        spaced = iter_eval_batches(data.eval_ids, B, T, n_batches=train_cfg.eval_iters, device=self.device)
        self.eval_batches = list(spaced)
        self.probe_batch = next(iter_eval_batches(data.eval_ids, B, T, device=self.device))

        self.step_count = 0
        self.history: dict[str, list[Any]] = {key: [] for key in CORE_KEYS}
        self.record = RunRecord(config=config, environment=environment(self.device), history=self.history)
        self._interruption = Interruption()  # stop requests and Ctrl-C: pending, inside an update, torn
        self._announced = False  # run.json written with status "running" by this trainer
        logger.info("Trainer: %d parameters on %s, %d steps of %d×%d tokens",
                    self.model.num_params(), self.device, train_cfg.steps, B, T)

    # ---------------------------------------------------------------------------------- the update
    def _update(self) -> dict[str, Any]:
        """One optimizer update, then its measurements (evaluation, probes) and bookkeeping; returns the row."""
        cfg, s = self.train_cfg, self.step_count
        B, T = cfg.batch_size, self.model_cfg.context_length
        lr = lr_at(s, cfg)
        start = time.perf_counter()
        with self._rng.active():
            x, y = get_batch(self.data.train_ids, B, T, self._batch_gen, self.device)  # (B, T), (B, T)
            train_loss, grad_norm = update(self.model, self.optimizer, x, y, lr, cfg.grad_clip, self._autocast())
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        row: dict[str, Any] = {"step": s, "train_loss": train_loss, "val_loss": None, "lr": lr,
                               "grad_norm": grad_norm, "tokens_per_s": B * T / (time.perf_counter() - start)}

        if not math.isfinite(train_loss) or grad_norm is None or not math.isfinite(grad_norm):
            what, value = ("train loss", train_loss) if not math.isfinite(train_loss) else ("gradient norm", grad_norm)
            append_rows(self.history, [row])
            self._diverge(f"{what} is {value} at update {s}; stopped before the optimizer step")
            return row
        self.step_count += 1
        last = self.step_count == cfg.steps
        if s % cfg.eval_interval == 0 or last:
            row["val_loss"] = self.evaluate()
        self._probe_set.measure(self, row, last)
        append_rows(self.history, [row])
        if row["val_loss"] is not None and not math.isfinite(row["val_loss"]):
            self._diverge(f"validation loss is {row['val_loss']} after update {s}")
        elif last:
            best = self.record.best_val_loss
            self._end("finished", f"finished {cfg.steps} updates; best val loss {best:.4f}", checkpoint=True)
        elif self.folder is not None and cfg.checkpoint_due(self.step_count, row["val_loss"] is not None):
            self._save(checkpoint=True)
        return row

    # --------------------------------------------------------------------------------------- control
    @property
    def last_checkpoint(self) -> int | None:
        """Updates done in the checkpoint in ``out_dir`` (written by this trainer, or the one it resumed from), or
        None: no folder, or no checkpoint there yet."""
        return self.folder.last_checkpoint if self.folder is not None else None

    @property
    def done(self) -> bool:
        """True unless the status is "running" (finished, stopped, diverged or interrupted)."""
        return self.record.status != "running"

    def request_stop(self) -> None:
        """Ask the trainer to stop at the next step boundary (thread-safe; e.g. a UI Stop button): the running
        ``step(n)`` / ``run()`` returns after the current update with status "stopped" (and a checkpoint in
        ``out_dir``). The request is consumed: a later ``step()`` or ``run()`` continues the run."""
        self._interruption.request_stop()

    def step(self, n: int = 1) -> list[dict[str, Any]]:
        """Run up to ``n`` optimizer updates and return their history rows: fewer when the run finishes, diverges
        or a stop was requested; ``[]`` once it finished or diverged. Ctrl-C (main thread) works as in :meth:`run`.

        Raises:
            ValueError: ``n`` not an integer >= 1.
            KeyboardInterrupt: after Ctrl-C, once the record (and checkpoint) are saved.
            RuntimeError: the trainer was interrupted inside an update earlier (resume from the checkpoint).
        """
        return self._loop(check_int("n", n, 1), None)

    def run(self, progress: bool | Callable[[dict[str, Any]], None] | None = None) -> RunRecord:
        """Train until ``train_cfg.steps`` updates are done (or the run stops, diverges or is interrupted).

        Args:
            progress: None; a callable ``fn(row)`` called after every update; or True for a
                :class:`~spanviz.train.callbacks.ProgressBar` (``tqdm.auto``, meant for the command line).
        Returns:
            ``self.record`` with status "finished", "stopped" or "diverged" (divergence does not raise).
        Raises:
            KeyboardInterrupt: re-raised after Ctrl-C, *after* the record (status "interrupted") and, with an
                ``out_dir``, a checkpoint of the last complete update were saved; a second Ctrl-C interrupts the
                update at once and writes none (:class:`~spanviz.train.guards.Interruption`).
        """
        remaining = self.train_cfg.steps - self.step_count
        if remaining <= 0 or self.record.status == "diverged":
            return self.record
        if progress is True:
            with ProgressBar(self) as bar:
                self._loop(remaining, bar)
        else:
            self._loop(remaining, progress)
        return self.record

    # ------------------------------------------------------------------------------------------ loop
    def _loop(self, n: int, on_row: Callable[[dict[str, Any]], None] | None) -> list[dict[str, Any]]:
        """Up to ``n`` updates; each followed by callbacks, ``on_row``, and the stop / Ctrl-C checks."""
        self._interruption.check()
        rows: list[dict[str, Any]] = []
        if self.record.status in ("finished", "diverged") or self.step_count >= self.train_cfg.steps:
            return rows
        self.record.status, self.record.message = "running", ""
        note_threads(self.record.environment, self.step_count)
        if self.folder is not None and not self._announced:
            self._save(checkpoint=False)  # a run killed before its first checkpoint still leaves a trace
            self._announced = True
        with self._interruption.guard(self._interrupted) as interruption:
            for _ in range(n):
                if self._honour_stop():
                    break
                with interruption.update():
                    row = self._update()
                rows.append(row)
                for cb in self.callbacks:
                    cb(self, row)
                if on_row is not None:
                    on_row(row)
                if self.done or self._honour_stop() or interruption.pending:
                    break
        return rows

    def _interrupted(self, torn: bool) -> None:
        """Record a Ctrl-C: checkpoint the last complete update, unless it struck inside an update."""
        if torn:
            self._end("interrupted", f"interrupted inside update {self.step_count}: the in-memory state may be "
                      f"half-updated, so no checkpoint was written.{self._on_disk()}", checkpoint=False)
        elif not self.done:
            self._end("interrupted", f"interrupted by Ctrl-C after {self.step_count} of {self.train_cfg.steps} "
                      "updates", checkpoint=True)
            if self.folder is not None:
                self.record.message += f".{self._on_disk()}"
                self._save(checkpoint=False)

    def _honour_stop(self) -> bool:
        if not self._interruption.stop_requested():
            return False
        if not self.done:
            self._end("stopped", f"stopped by request after {self.step_count} of {self.train_cfg.steps} updates",
                      checkpoint=True)
        return True

    def _autocast(self) -> Any:
        if self.train_cfg.dtype == "bfloat16":
            return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
        return nullcontext()

    # ------------------------------------------------------------------------------ ending and saving
    def _diverge(self, what: str) -> None:
        clip = self.train_cfg.grad_clip
        fix = (" or enable gradient clipping (grad_clip=1.0)" if clip is None
               else f" or a smaller grad_clip (now {clip:g})")
        hint = f"try a lower lr (peak lr={self.train_cfg.lr:g}){fix}"
        self._end("diverged", f"diverged: {what}; {hint}.{self._on_disk()}", checkpoint=False)

    def _end(self, status: str, message: str, *, checkpoint: bool) -> None:
        self.record.status, self.record.message = status, message
        (logger.warning if status in ("diverged", "interrupted") else logger.info)("run %s: %s", status, message)
        self._save(checkpoint=checkpoint)

    def _save(self, *, checkpoint: bool) -> None:
        """Write run.json (and, with ``checkpoint``, checkpoint.pt) into the run's folder (nothing without one);
        non-finite weights turn the run "diverged" instead of being checkpointed, so the last good checkpoint
        stays. A running run's message says how far it got and what the checkpoint holds.

        Written when training starts (run.json, status "running"), at every checkpoint (see
        ``TrainConfig.checkpoint_interval``: by default after every evaluation) and when the run ends (both; only
        run.json when it diverges or a Ctrl-C struck inside an update).
        """
        if self.folder is None:
            return
        if checkpoint:
            bad = nonfinite_parameter(self.model)
            if bad is None:
                self.folder.write_checkpoint(self.state_dict(), self.step_count)
            else:
                self.record.status = "diverged"
                self.record.message = (f"diverged: parameter {bad} became non-finite by update {self.step_count}; "
                                       f"try a lower lr or gradient clipping.{self._on_disk()}")
                logger.warning("run diverged: %s", self.record.message)
        if self.record.status == "running":
            self.record.message = self.folder.progress(self.step_count, self.train_cfg.steps)
        self.folder.write_record(self.record)

    def _on_disk(self) -> str:
        """What the run's folder holds, as a sentence starting with a space (empty without a folder)."""
        return self.folder.contents(self.train_cfg.steps) if self.folder is not None else ""

    # ----------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue this run exactly: a dict of state dicts, the contents of a checkpoint.

        Keys: ``format`` (``CHECKPOINT_FORMAT``), ``model_config`` and ``train_config`` (JSON strings), ``record``
        (the run record as JSON text, history included), ``step`` (updates done), ``model`` and ``optimizer``
        state dicts, ``rng`` (``torch``: the CPU RNG state dropout draws from, ``cuda`` on CUDA, ``batch``: the
        batch generator's state; uint8 tensors), ``probes`` (JSON text of the probes' ``state_dict()``). As with
        ``nn.Module.state_dict`` the weight tensors are the live ones: save or clone them before training on.
        """
        return {
            "format": CHECKPOINT_FORMAT,
            "model_config": json.dumps(self.model_cfg.to_dict()),
            "train_config": json.dumps(self.train_cfg.to_dict()),
            "record": self.record.to_json(),
            "step": self.step_count,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": {**self._rng.state_dict(), "batch": self._batch_gen.get_state()},
            "probes": to_json_text(self._probe_set.state_dict()),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state`` (a :meth:`state_dict`, e.g. a checkpoint's, checked by :func:`load_checkpoint`):
        weights, optimizer, RNG states, probe state (matched by name), step count, history, status and thread
        counts. This trainer's configs stay (a resumed run may have a larger total of steps).

        Raises:
            ValueError: the state does not fit this trainer (other shapes, a foreign optimizer or RNG state).
        """
        saved = check_state(state, "the state", self.model, self.optimizer)[2]  # all checks, before any change
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            check_moments(self.optimizer)
            self._rng.load_state_dict(state["rng"])
            self._batch_gen.set_state(state["rng"]["batch"])
            self._probe_set.load_state_dict(json.loads(state.get("probes", "{}")))
        except (RuntimeError, ValueError, TypeError, KeyError) as error:
            raise ValueError(f"the state does not fit this trainer ({first_line(error)})") from None
        self.step_count = state["step"]
        self.history.clear()
        self.history.update(saved.history)  # same dict object as self.record.history
        done = saved.status == "finished" and self.step_count >= self.train_cfg.steps
        self.record.status = "finished" if done else "running"
        for key in ("num_threads", "num_threads_changes"):  # the threads the saved updates used (note_threads)
            if key in saved.environment:
                self.record.environment[key] = saved.environment[key]

    def save_checkpoint(self, path: str | os.PathLike[str]) -> Path:
        """Save :meth:`state_dict` to ``path`` atomically (old file kept on error); ``torch.load(path,
        weights_only=True)`` reads it back.

        Returns:
            The path written.
        Raises:
            RuntimeError: a parameter is non-finite (a bad state is never written).
        """
        return save_checkpoint(path, self.state_dict())

    @classmethod
    def resume(cls, path: str | os.PathLike[str] | Checkpoint, data: Any, *, probes: Sequence[Probe] = (),
               callbacks: Sequence[Callable[[Trainer, dict[str, Any]], None]] = (),
               out_dir: str | os.PathLike[str] | None = None, steps: int | None = None) -> Trainer:
        """Continue a run from a checkpoint written by :meth:`save_checkpoint`.

        Builds a trainer from the checkpoint's configs (incl. extra record entries) and loads its
        :meth:`state_dict` (:meth:`load_state_dict`). On CPU, with the run's thread count
        (``checkpoint.record.environment["num_threads"]``; ``spanviz train --resume`` sets it), the continued
        loss curve is bit-for-bit the one an uninterrupted run would have produced. The status becomes
        "running" (or stays "finished": then the ``run.json`` in ``out_dir`` is rewritten, as a kill during the
        run's final write may have left an older one). Where from is noted in
        ``record.environment["resumed_from"]`` (the file's name and step, no path); when the checkpoint is the one
        in ``out_dir``, ``last_checkpoint`` is its step. A ``data`` or ``probes`` config unlike the checkpoint's
        is logged as a warning.

        Args:
            path: the checkpoint file, or a :class:`Checkpoint` from :func:`load_checkpoint`.
            data: the same token data as the original run (a different ``describe()`` is logged as a warning:
                the curve will not match). probes, callbacks, out_dir: as in :class:`Trainer` (pass the same
                probes to keep the same history columns).
            steps: a new total number of updates, >= the updates already done (None = the saved total); a
                larger one extends the run, also a finished one (see :func:`~spanviz.train.checkpoint.resumed_configs`
                for the schedule of an extension and ``config["extended_from_steps"]``).
        Raises:
            ValueError: a damaged or foreign checkpoint (:class:`CheckpointError`, naming the file), a
                ``steps`` below the updates done, or configs / data that do not fit (see :class:`Trainer`).
        """
        ckpt = path if isinstance(path, Checkpoint) else load_checkpoint(path)
        train_cfg, extra = resumed_configs(ckpt, steps)
        trainer = cls(ckpt.model_cfg, train_cfg, data, probes=probes, callbacks=callbacks, out_dir=out_dir,
                      extra_config=extra)
        trainer._continue_from(ckpt)
        return trainer

    def _continue_from(self, ckpt: Checkpoint) -> None:
        """Continue ``ckpt``'s run in this freshly built trainer (see :meth:`resume`).

        Raises:
            CheckpointError: the state does not fit the checkpoint's own configuration.
        """
        for part in ("data", "probes"):
            if ckpt.record.config.get(part) != self.record.config[part]:
                logger.warning("resume: %s differs from the checkpoint's (%s vs %s); the continued curve will not "
                               "match the original run", part, self.record.config[part], ckpt.record.config.get(part))
        # which checkpoint, not where it lay: a run record holds no path of the machine (set first: the key order of
        # run.json stays that of earlier versions)
        self.record.environment["resumed_from"] = {"checkpoint": Path(ckpt.path).name, "step": ckpt.step}
        try:
            self.load_state_dict(ckpt.state)
        except ValueError as error:
            raise CheckpointError(f"{ckpt.path} is damaged: {error}") from None
        if self.folder is not None:
            self.folder.adopt(ckpt.path, ckpt.step)
            if self.done:
                # The checkpoint holds the finished run: its run.json may be older (a kill -9 during the final write
                # left status "running"), and run() has nothing to do and would not rewrite it.
                self._save(checkpoint=False)

    # ------------------------------------------------------------------------------------- evaluation
    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean cross-entropy [nats] over the ``eval_iters`` fixed evaluation batches (the same at every call:
        evenly spaced windows of the eval split), in eval mode without gradients; the model's mode is restored."""
        losses = []
        with eval_mode(self.model):
            for x, y in self.eval_batches:
                with self._autocast():
                    _, loss = self.model(x, y, return_logits=False)  # x, y: (B, T) → scalar
                losses.append(loss.float())
        return torch.stack(losses).mean().item()
