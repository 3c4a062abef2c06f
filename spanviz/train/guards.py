"""What keeps a run to itself: its own random-number stream (:class:`PrivateRNG`: another torch user in the
process never changes its curve, and it never changes theirs) and Ctrl-C deferred to the end of the current
update (:func:`deferred_sigint`), where the state is consistent and can be checkpointed."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
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

    def _read(self) -> dict[str, Tensor]:
        state = {"cpu": torch.get_rng_state()}
        if self.devices:
            state["cuda"] = torch.cuda.get_rng_state(self.device)
        return state
