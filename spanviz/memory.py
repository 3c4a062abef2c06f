"""Keep freed memory in the process: glibc malloc settings for a training loop that frees and re-allocates the
same buffers every step.

glibc's malloc hands large freed blocks straight back to the operating system: blocks above the mmap threshold
(which adapts up to 32 MB) are unmapped on free, and free memory above the trim threshold at the top of a heap
is trimmed. A training step frees its activations and asks for the same sizes again a moment later, so each
step paid for fresh pages — about 10⁵ page faults and 0.25 s of system time per step at the notebook size on a
2-core machine, a third of the step (measured; spanviz's loss no longer allocates its 67 MB logits, see
:mod:`spanviz.lm_loss`, which removed most of it). :func:`keep_freed_memory` fixes both thresholds, so
blocks up to 32 MB are reused from the heap and up to 128 MB of free memory stays mapped; the process's peak
memory does not grow (the same blocks are reused).

Called where spanviz starts a run (:class:`spanviz.train.Trainer`), so the command line and a notebook kernel
training a panel get it alike. The settings are process-wide and only change when memory goes back to the
system, never what a program computes. Elsewhere than Linux with glibc it does nothing.
Source: glibc ``mallopt(3)``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

logger = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc's <malloc.h>
MMAP_THRESHOLD = 32 * 2**20
"""Blocks above this are mapped from the system on their own (and unmapped on free): 32 MB, glibc's own upper
limit for its adaptive threshold, fixed instead of adapting."""
TRIM_THRESHOLD = 128 * 2**20
"""Free memory at the top of a heap beyond this goes back to the system."""
TOP_PAD = 64 * 2**20
"""Extra room taken whenever a heap grows (address space; pages count only once used)."""

_done: bool | None = None


def keep_freed_memory() -> bool:
    """Set glibc malloc's mmap threshold, trim threshold and top pad (module docstring); once per process.

    Returns:
        True when the settings are in force (Linux with glibc), False elsewhere (nothing changed).
    """
    global _done
    if _done is not None:
        return _done
    _done = False
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    _done = all(mallopt(param, value) == 1 for param, value in
                ((M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_TOP_PAD, TOP_PAD)))
    logger.debug("glibc malloc: mmap threshold %d, trim threshold %d, top pad %d: %s", MMAP_THRESHOLD,
                 TRIM_THRESHOLD, TOP_PAD, "set" if _done else "refused")
    return _done
