"""Precompute the workshop bundle: each notebook's default comparison, run as a person would, plus sweep runs.

1. Executes the code cells of notebooks 00-03 in order, headless (no Jupyter: display() is a no-op, shell and
   magic lines are skipped), with their default parameters and ``SPANVIZ_BLOCKING=1`` — the same as opening
   each notebook and pressing Train with the defaults. The panels put every finished run into the results store
   (``$SPANVIZ_HOME/runs``) under the key the notebooks compute, so the same defaults replay at once later.
2. Exports those runs (the store's untagged ones) and the store's sweep runs tagged with ``--include``
   (``experiment/size``, e.g. ``ls/gpu``) into one archive, by default ``spanviz/bundles/workshop-gpu.zip``,
   which :func:`spanviz.store.load_bundle` (or ``spanviz runs import FILE``) loads in one call.

Run it where the runs should come from (a GPU machine for the shipped bundle), with WikiText-2 where the
notebooks look for it (``SPANVIZ_WIKITEXT_DIR`` and the split variables, as ``scripts/setup.sh`` sets them)::

    python scripts/make_workshop_bundle.py --include ls/gpu spans/gpu-heads

Source: spanviz.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_notebook(path: Path, namespace: dict | None = None) -> dict:
    """Execute a notebook's code cells in order in ``namespace`` (a new dict by default) and return it; raises
    what a cell raises."""
    namespace = {} if namespace is None else namespace
    namespace.update(__name__="__main__", display=lambda *args, **kwargs: None)
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code":
            continue
        lines = "".join(cell["source"]).splitlines()
        code = "\n".join(line for line in lines if not line.lstrip().startswith(("!", "%")))
        exec(compile(code, str(path), "exec"), namespace)  # noqa: S102 - our own notebooks
    return namespace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--include", nargs="*", default=[], metavar="EXPERIMENT/SIZE",
                        help="also bundle the store's sweep runs with these tags, e.g. ls/gpu spans/gpu-heads")
    parser.add_argument("--out", type=Path, default=None, help="the archive (default: spanviz's shipped bundle)")
    args = parser.parse_args(argv)
    os.environ["SPANVIZ_BLOCKING"] = "1"
    os.environ["SPANVIZ_GPU_BUNDLE"] = "0"  # train the defaults here; never replay an older bundle
    os.environ.pop("SPANVIZ_SMOKE", None)
    os.chdir(REPO / "notebooks")  # notebooks run from their folder in JupyterLab too
    for path in sorted((REPO / "notebooks").glob("0*.ipynb")):
        start = time.perf_counter()
        run_notebook(path)
        print(f"{path.name}: done in {time.perf_counter() - start:.0f} s", flush=True)

    from spanviz.store import BUNDLE, ResultsStore, describe_runs

    store = ResultsStore()
    keys, records = [], []
    for key, record in store.records():
        tags = record.config.get("tags")
        if tags is None or f"{tags.get('experiment')}/{tags.get('size')}" in args.include:
            keys.append(key)
            records.append(record)
    out = store.export(args.out or BUNDLE, keys)
    print(f"{out}: {out.stat().st_size / 1e6:.2f} MB, " + json.dumps(describe_runs(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
