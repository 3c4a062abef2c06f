"""The ``spanviz`` command: ``prepare-data``, ``train``, ``sweep``, ``runs``, ``bench`` (also ``python -m spanviz``).

Examples::

    spanviz prepare-data --data-dir ~/data/wikitext-2 --train-split validation --eval-split test
    spanviz train --steps 300 --out runs/demo          # reads the folder prepare-data remembered
    spanviz train --resume --out runs/demo --steps 600 # after Ctrl-C, kill -9, or to extend a finished run
    spanviz train --spans-preset kv8 --alphas 1000 --out runs/kv8-1000
    spanviz train --config runs/demo/run.json --lr 1e-3 --out runs/lower-lr
    spanviz sweep ls --steps 300 --model context_length=1024 --train batch_size=4
    spanviz runs export workshop.zip      # then, on the students' machines: spanviz runs import workshop.zip

One module per subcommand (:mod:`~spanviz.cli.prepare_data`, :mod:`~spanviz.cli.train` with its checks in
:mod:`~spanviz.cli.train_flags`, :mod:`~spanviz.cli.train_plans`, :mod:`~spanviz.cli.sweep`, :mod:`~spanviz.cli.runs`, :mod:`~spanviz.cli.bench`),
each a dataclass of flags and a ``cmd_*`` function; :mod:`~spanviz.cli.app` parses with ``tyro`` and dispatches (not
named ``main``: imported on first use, a submodule ``main`` would rebind this package's function ``main``);
:mod:`~spanviz.cli.common` holds what several share (data flags, messages in flag names, ``SPANVIZ_SMOKE``);
:mod:`~spanviz.cli.help` answers ``spanviz --help`` alone without importing the commands.

One source of truth: the model and training flags are the fields of :class:`~spanviz.model.GPTConfig` and
:class:`~spanviz.train.TrainConfig` themselves — tyro reads their names, types, defaults and help (the
docstrings' ``Attributes:``), and building them validates the values. ``--config FILE`` (a JSON object with
``model`` / ``train`` sections, or a ``run.json``) gives values that typed flags then override; the sweep's
``--model KEY=VALUE`` / ``--train KEY=VALUE`` take the same fields, each VALUE parsed by tyro as its field's type.

Every argument is checked before any data is loaded or any model is built; errors are one line naming the flag,
the value and what is allowed (a flag tyro cannot parse: tyro's own message, then that line). ``spanviz train``
never loses a run: it locks ``--out``, checks that ``--out`` and ``$SPANVIZ_HOME`` can be written, checkpoints at
every evaluation, and ``--resume`` continues the same curve after any interruption.

``SPANVIZ_SMOKE=1`` runs a seconds-long version of any command (for CI: steps ÷ 100, context ≤ 32, batch ≤ 4,
at most 2 evaluation batches and 2 seeds, the quick core step-ratio benchmark); the command says so on stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``spanviz`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status (see
    :func:`spanviz.cli.app.main`). ``spanviz --help`` alone is answered without importing the commands
    (:mod:`spanviz.cli.help`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["-h"], ["--help"]):
        from spanviz.cli.help import top_help

        return top_help()
    from spanviz.cli.app import main as run

    return run(args)
