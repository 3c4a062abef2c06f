"""What keeps a run to itself: its own random-number stream (:class:`PrivateRNG`: another torch user in the
process never changes its curve, and it never changes theirs) and Ctrl-C kept to the boundaries between updates
(:class:`Interruption`: deferred to the end of the current update, where the state is consistent and can be
checkpointed; a second Ctrl-C inside an update marks the trainer torn).

Determinism: one ``seed`` controls a trainer's initial weights, its training batches (a ``torch.Generator`` of
its own) and dropout (a :class:`PrivateRNG`, swapped in for each update). The trainer therefore never disturbs,
and is never disturbed by, other users of torch's global RNG (another trainer in the same process, a probe that
draws random numbers). On CPU, with the same torch build and the same number of torch threads, the same seed
gives the same loss curve bit for bit, and a run resumed from a checkpoint continues the very same curve
(floating-point sums split over another number of threads add in another order). The record keeps the thread
count its updates used (:func:`~spanviz.train.record.note_threads`)."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

logger = logging.getLogger(__name__)


@contextmanager
def deferred_sigint() -> Iterator[dict[str, bool]]:
    """Inside the block (main thread only), a first Ctrl-C only sets ``state["pending"]``; a second raises.

    This lets the training loop finish the current step and stop between steps, where the state is
    consistent and can be checkpointed.
    """
    state = {"pending": False}
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def handler(signum: int, frame: Any) -> None:
        if state["pending"]:
            raise KeyboardInterrupt
        state["pending"] = True
        logger.warning("Ctrl-C: stopping after the current step (press again to abort at once)")

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # e.g. an embedded interpreter that does not allow signal handlers
        yield state
        return
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)


class Interruption:
    """Stop requests and Ctrl-C around a training loop: the state machine of "pending", "inside an update" and
    "torn".

    :meth:`request_stop` (thread-safe) asks the loop to stop at the next boundary; :meth:`stop_requested` reads
    and consumes that request.

    Use ``with interruption.guard(on_interrupt):`` around the loop and ``with interruption.update():`` around
    each update. Inside the guard (main thread) a first Ctrl-C only sets :attr:`pending` (the loop stops after
    the current update and the guard then raises ``KeyboardInterrupt``); a second raises at once. On either
    path ``on_interrupt(torn)`` runs before the ``KeyboardInterrupt`` propagates, with ``torn`` True when it
    struck inside an update — the in-memory state may then be half-updated, and :meth:`check` refuses from
    then on. Our reconstruction of the usual "finish the step, then stop" handling.

    Attributes:
        torn: True once a Ctrl-C struck inside an update.
    """

    def __init__(self) -> None:
        self.torn = False
        self._inside = False  # True from the batch draw to the appended row
        self._sigint: dict[str, bool] = {"pending": False}
        self._stop = threading.Event()

    def request_stop(self) -> None:
        """Ask the loop to stop at the next boundary between updates (thread-safe, e.g. from a UI thread)."""
        self._stop.set()

    def stop_requested(self) -> bool:
        """True once after :meth:`request_stop` (the request is consumed)."""
        if not self._stop.is_set():
            return False
        self._stop.clear()
        return True

    @property
    def pending(self) -> bool:
        """True when a first Ctrl-C arrived inside the current :meth:`guard`: stop after this update."""
        return self._sigint["pending"]

    def check(self) -> None:
        """RuntimeError when an earlier Ctrl-C struck inside an update (continue from the last checkpoint)."""
        if self.torn:
            raise RuntimeError("this trainer was interrupted inside an update, so its state may be half-updated; "
                               "continue from its last checkpoint (Trainer.resume)")

    @contextmanager
    def guard(self, on_interrupt: Callable[[bool], None]) -> Iterator[Interruption]:
        """The block of a training loop; see the class. Raises ``KeyboardInterrupt`` after ``on_interrupt``."""
        with deferred_sigint() as sigint:
            self._sigint = sigint
            try:
                yield self
                if sigint["pending"]:
                    raise KeyboardInterrupt
            except KeyboardInterrupt:
                self.torn = self._inside
                on_interrupt(self._inside)
                raise

    @contextmanager
    def update(self) -> Iterator[None]:
        """The block of one update: a Ctrl-C that ends it early leaves the trainer torn."""
        self._inside = True
        yield
        self._inside = False


class PrivateRNG:
    """A private copy of torch's RNG state (CPU, plus CUDA on a CUDA ``device``), swapped in for a block.

    Attributes:
        state: ``{"cpu": uint8 tensor, "cuda": uint8 tensor (CUDA only)}``, saved in checkpoints.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.devices = [device] if device.type == "cuda" else []
        self.state: dict[str, Tensor] = {}

    @contextmanager
    def seeded(self, seed: int) -> Iterator[None]:
        """Within the block torch's RNG is seeded with ``seed``; this stream continues from where the block ends."""
        with torch.random.fork_rng(devices=self.devices):
            torch.manual_seed(seed)
            yield
            self.state = self._read()

    @contextmanager
    def active(self) -> Iterator[None]:
        """Swap this stream in for the block (dropout draws from it), torch's global one back after."""
        with torch.random.fork_rng(devices=self.devices):
            torch.set_rng_state(self.state["cpu"])
            if "cuda" in self.state:
                torch.cuda.set_rng_state(self.state["cuda"], self.device)
            try:
                yield
            finally:
                self.state = self._read()

    def state_dict(self) -> dict[str, Tensor]:
        """The stream's state as a checkpoint keeps it: ``{"torch": CPU state, "cuda": CUDA state (CUDA only)}``."""
        return {"torch": self.state["cpu"], **({"cuda": self.state["cuda"]} if "cuda" in self.state else {})}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Continue the stream of :meth:`state_dict` (other keys are ignored). Without a ``cuda`` entry on CUDA the
        CUDA stream stays as seeded (a warning: dropout will differ from the original run)."""
        self.state["cpu"] = state["torch"]
        if "cuda" in self.state:
            if "cuda" in state:
                self.state["cuda"] = state["cuda"]
            else:
                logger.warning("resume: the checkpoint has no CUDA RNG state; dropout will differ from the original")

    def _read(self) -> dict[str, Tensor]:
        state = {"cpu": torch.get_rng_state()}
        if self.devices:
            state["cuda"] = torch.cuda.get_rng_state(self.device)
        return state
