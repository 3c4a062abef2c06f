"""A run's output folder: ``run.json`` (its :class:`~spanviz.train.record.RunRecord`) and ``checkpoint.pt`` (its
last good checkpoint, :mod:`spanviz.train.checkpoint`). :class:`RunFolder` owns the two names, writes both files
(each atomically: a kill leaves the old file or the new one, never half of one) and remembers which update the
checkpoint on disk holds, so the sentences a run's record carries about its folder are written in one place.

*When* the files are written is the trainer's (:class:`spanviz.train.Trainer`): ``run.json`` when training starts,
both at every checkpoint and when the run ends, only ``run.json`` when it diverges.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spanviz.train.checkpoint import save_checkpoint
from spanviz.train.record import RunRecord

RECORD_FILE = "run.json"
CHECKPOINT_FILE = "checkpoint.pt"


class RunFolder:
    """The folder of one run's ``run.json`` and ``checkpoint.pt``.

    Args:
        path: the folder (created by the first write when missing).

    Attributes:
        path (Path), record_path (``path / "run.json"``), checkpoint_path (``path / "checkpoint.pt"``),
        last_checkpoint: the updates done in the checkpoint this object wrote or was told of
        (:meth:`adopt`), or None when there is none yet.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.record_path = self.path / RECORD_FILE
        self.checkpoint_path = self.path / CHECKPOINT_FILE
        self.last_checkpoint: int | None = None

    def write_record(self, record: RunRecord) -> Path:
        """Write ``record`` to ``run.json`` atomically (:meth:`RunRecord.save`). Returns the path.

        Raises:
            ValueError: something in the record is not JSON-able (nothing is written). OSError: the file cannot be
                written; the old one stays.
        """
        return record.save(self.record_path)

    def write_checkpoint(self, state: Mapping[str, Any], step: int) -> Path:
        """Write ``state`` (a trainer's state dict after ``step`` updates) to ``checkpoint.pt`` atomically
        (:func:`~spanviz.train.checkpoint.save_checkpoint`) and remember ``step`` once it is there. Returns the path.

        Raises:
            RuntimeError: non-finite weights (nothing is written). OSError: the file cannot be written (e.g. a full
                disk); the old checkpoint stays, and so does :attr:`last_checkpoint`.
        """
        path = save_checkpoint(self.checkpoint_path, state)
        self.last_checkpoint = step
        return path

    def adopt(self, path: str | os.PathLike[str], step: int) -> None:
        """Note that the checkpoint at ``path``, holding ``step`` updates, is this folder's ``checkpoint.pt`` when it
        is (a run resumed from its own folder); a checkpoint elsewhere changes nothing."""
        if Path(path).resolve() == self.checkpoint_path.resolve():
            self.last_checkpoint = step

    def progress(self, step: int, total: int) -> str:
        """The message of a running run's record: ``"{step} of {total} updates done; "`` and what the checkpoint
        holds."""
        held = ("no checkpoint yet" if self.last_checkpoint is None
                else f"checkpoint.pt holds {self.last_checkpoint} updates")
        return f"{step} of {total} updates done; {held}"

    def contents(self, total: int) -> str:
        """What the folder holds, as a sentence starting with a space, for the message of a run that ended badly
        (``total`` is the run's number of updates). It names the files, not the folder: the message goes into the
        run record, which holds no path of the machine (the command line prints the folder)."""
        if self.last_checkpoint is None:
            return " No checkpoint had been written yet; the history is in run.json in the output folder."
        return (f" The last good checkpoint ({self.last_checkpoint} of {total} updates) is "
                "checkpoint.pt in the output folder; the history is in run.json there.")
