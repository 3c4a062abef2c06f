"""Execute every notebook headless in smoke mode (tiny models, a few steps) and fail on any cell error or warning.

Environment given to the kernel: ``SPANVIZ_SMOKE=1`` (the notebooks' ``parameters`` cells shrink everything),
``SPANVIZ_BLOCKING=1`` (Train runs in the cell, so the run is part of the execution), the offline WikiText-2
folder with its split mapping (train on validation, evaluate on test), and ``SPANVIZ_HOME`` in a temporary
folder whose token cache is warmed once per session. Skipped only when the offline data folder is missing
and ``SPANVIZ_WIKITEXT_DIR`` is unset (the notebooks would go to the Hugging Face hub).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
WIKITEXT = REPO.parent / "shared" / "data" / "wikitext-2"
SMOKE_BUDGET_S = float(os.environ.get("SPANVIZ_NOTEBOOK_BUDGET_S", "240"))  # per notebook, generous for CI


@pytest.fixture(scope="module")
def smoke_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    data_dir = os.environ.get("SPANVIZ_WIKITEXT_DIR") or (str(WIKITEXT) if WIKITEXT.is_dir() else None)
    if data_dir is None:
        pytest.skip(f"no offline WikiText-2 ({WIKITEXT} missing, SPANVIZ_WIKITEXT_DIR unset)")
    env = {
        "SPANVIZ_SMOKE": "1",
        "SPANVIZ_BLOCKING": "1",
        "SPANVIZ_STATIC": "0",
        "SPANVIZ_WIKITEXT_DIR": data_dir,
        "SPANVIZ_TRAIN_SPLIT": os.environ.get("SPANVIZ_TRAIN_SPLIT", "validation"),
        "SPANVIZ_EVAL_SPLIT": os.environ.get("SPANVIZ_EVAL_SPLIT", "test"),
        "SPANVIZ_HOME": str(tmp_path_factory.mktemp("spanviz-home")),
        "SPANVIZ_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
    }
    from spanviz.data import prepare_tokens

    cleared = ("SPANVIZ_STEPS",)  # a developer's override must not turn the smoke run into a long one
    old = {k: os.environ.get(k) for k in (*env, *cleared)}
    for k in cleared:
        os.environ.pop(k, None)
    os.environ.update(env)
    try:  # warm the token cache once (word-level, vocab 8192: what the notebooks ask for)
        prepare_tokens(splits={"train": env["SPANVIZ_TRAIN_SPLIT"], "eval": env["SPANVIZ_EVAL_SPLIT"]},
                       max_vocab=8192)
        yield env
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_notebooks_found() -> None:
    names = [nb.name for nb in NOTEBOOKS]
    assert names == ["00_tour.ipynb", "01_spans_and_violations.ipynb", "02_local_global_heads.ipynb",
                     "03_fp8_logit_bounds.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[nb.stem for nb in NOTEBOOKS])
def test_notebook_is_committed_clean(path: Path) -> None:
    """No outputs or execution counts in the repository; a tagged ``parameters`` cell with the smoke switch."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, f"{path.name}: cells {dirty} have outputs; clear them (jupyter nbconvert --clear-output)"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: expected one cell tagged 'parameters', found {len(tagged)}"
    assert 'os.environ.get("SPANVIZ_SMOKE"' in tagged[0].source
    # saved as nbformat writes it (as JupyterLab and scripts/render_docs.py do): a rendering changes only its blocks
    assert path.read_text() == nbformat.writes(nb) + "\n", f"{path.name}: not in nbformat's layout; rewrite it with " \
        "nbformat.write (a hand-dumped JSON makes every render a diff)"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[nb.stem for nb in NOTEBOOKS])
def test_notebook_runs_in_smoke_mode(path: Path, smoke_env: dict[str, str], tmp_path: Path) -> None:
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=SMOKE_BUDGET_S, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    t0 = time.perf_counter()
    client.execute()  # raises CellExecutionError (with the traceback) on the first failing cell
    seconds = time.perf_counter() - t0
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{path.name}: error outputs {errors}"
    # A warning box in front of a student is a failure too (00 once printed "Out of range float values are
    # not JSON compliant" for the NaN of the masked attention scores).
    stderr = [o.text for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "stream" and o.name == "stderr"]
    assert not stderr, f"{path.name}: warnings in the outputs:\n" + "\n".join(stderr)
    print(f"{path.name}: {seconds:.1f} s")
    assert seconds < SMOKE_BUDGET_S
