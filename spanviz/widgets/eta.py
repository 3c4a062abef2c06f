"""How long a live run has left, from its measured step rate (:class:`StepRate`), in words (:func:`time_left`)."""

from __future__ import annotations

import time
from collections import deque

WINDOW_S = 30.0
"""The step rate is measured over the last WINDOW_S seconds: recent enough to follow a machine that got busier,
long enough to average over the evaluations (a batch of eval steps every ``eval_interval`` updates)."""
MIN_SPAN_S, MIN_STEPS = 1.0, 2
"""No estimate before the rate rests on this many seconds and steps (the first steps build the model)."""


class StepRate:
    """Steps per second over the last :data:`WINDOW_S` seconds, from ``(time, steps done)`` samples.

    ``add(done)`` records the steps done so far (all runs together); ``rate()`` is None until the samples span
    :data:`MIN_SPAN_S` seconds and :data:`MIN_STEPS` steps.
    """

    def __init__(self, clock=time.perf_counter) -> None:
        self.clock = clock
        self.samples: deque[tuple[float, int]] = deque()

    def reset(self, done: int = 0) -> None:
        """Start measuring afresh (a new run or a continuation), from ``done`` steps."""
        self.samples.clear()
        self.samples.append((self.clock(), done))

    def add(self, done: int) -> None:
        now = self.clock()
        if not self.samples:
            self.samples.append((now, done))
            return
        self.samples.append((now, done))
        while len(self.samples) > 2 and now - self.samples[1][0] >= WINDOW_S:
            self.samples.popleft()

    def rate(self) -> float | None:
        """Steps per second, or None without enough measurement yet."""
        if len(self.samples) < 2:
            return None
        (t0, d0), (t1, d1) = self.samples[0], self.samples[-1]
        if t1 - t0 < MIN_SPAN_S or d1 - d0 < MIN_STEPS:
            return None
        return (d1 - d0) / (t1 - t0)

    def seconds_left(self, remaining: int) -> float | None:
        """Seconds for ``remaining`` steps at the measured rate, or None without one."""
        rate = self.rate()
        return None if rate is None or rate <= 0 else remaining / rate


def time_left(seconds: float | None) -> str:
    """``"about 45 s left"`` (under 90 s, to 5 s), ``"about 4 min left"`` (whole minutes); ``"estimating time
    left…"`` for None."""
    if seconds is None:
        return "estimating time left…"
    if seconds < 90:
        return f"about {max(5, 5 * round(seconds / 5))} s left"
    return f"about {round(seconds / 60)} min left"
