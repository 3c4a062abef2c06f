"""Make the workshop bundle from one commit with one command: the notebooks' defaults and the paper-sized sweeps,
trained side by side on one GPU, then exported into one archive.

What it trains, each task its own process (``--jobs`` at a time, longest first; all share one fresh results store):

1. **The notebooks' defaults**: the code cells of notebooks 00-03 in order, headless (no Jupyter: display() is a
   no-op, shell and magic lines are skipped), with their default parameters and ``SPANVIZ_BLOCKING=1`` — the same
   as opening each notebook and pressing Train with the defaults. The panels put every finished run into the
   store under the key the notebooks compute (the tour's with its final weights), so the same defaults replay at
   once later.
2. **The paper-sized sweeps** (``--sweeps``, see ``docs/gpu.md``): ``ls/gpu`` (MHSA, LS, QK-norm at T 2048) and
   ``spans/gpu-heads`` (kv8 [1111] vs [1000] at 4, 8, 16 heads), ``scripts/gpu_paper_runs.py`` with one process
   per variant and seed; with ``--results DIR`` their summaries (``ls_gpu.json``, ``spans_gpu_heads.json`` and the
   per-seed tables) are written there.

Then it checks that every run came from the same code (one ``source_sha256``, see :mod:`spanviz.provenance`) and
exports the notebooks' runs and the sweeps' into one archive, by default ``spanviz/bundles/workshop-gpu.zip``,
which :func:`spanviz.store.load_bundle` (or ``spanviz runs import FILE``) loads in one call. The manifest's
"about" says how it was made. The data: the local WikiText-2 folder given, trained on its validation split and
evaluated on its test split (what the offline copy has); the bundle replays on other data variants too (the
train split on Binder), and the panels say which data the runs were trained on.

On the GPU machine (no internet; the repository copy there is no git checkout, so give the commit it was made
from — it is recorded beside the source digest, which anyone can check against that commit with
:func:`spanviz.provenance.source_digest_at`)::

    python scripts/make_workshop_bundle.py --data-dir DIR --sweeps --jobs 16 --results docs/results \\
        --commit <sha of the commit checked out> --home .bundle-home --deadline 540

``--home`` in the repository keeps the finished runs for a second call should ``--deadline`` stop the first:
the same command then replays them and trains only the rest (each run is stored when it finishes).

A CPU rehearsal of the same code paths in about a minute: ``--smoke`` (tiny sizes, nothing written into the
repository unless ``--out`` / ``--results`` say so). Source: spanviz.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAPER_RUNS = REPO / "scripts" / "gpu_paper_runs.py"
NOTEBOOKS = ("00", "01", "02", "03")
SWEEPS = ("ls/gpu", "spans/gpu-heads")
LS_VARIANTS = ("mhsa", "ls", "qk_norm")
SPANS_HEADS = (4, 8, 16)


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


@dataclass
class Task:
    """One process: a name (its log file), its command, and a rough size (bigger starts first)."""

    name: str
    argv: list[str]
    weight: float
    started: float | None = None
    seconds: float | None = None
    returncode: int | None = None
    process: subprocess.Popen | None = field(default=None, repr=False)


def plan(args: argparse.Namespace) -> list[Task]:
    """The processes to run: one per notebook, and with ``--sweeps`` one per sweep variant and seed."""
    py = sys.executable
    # the notebooks first: few, short, and what students replay; then the sweeps, longest first
    tasks = [Task(f"notebook-{nb}", [py, __file__, "--run-notebook", nb], 9.0) for nb in args.notebooks]
    if args.sweeps:
        common = ["--data-dir", str(args.data_dir), *(["--smoke"] if args.smoke else [])]
        for seed in args.seeds:
            for variant in LS_VARIANTS:
                tasks.append(Task(f"ls-{variant}-seed{seed}",
                                  [py, str(PAPER_RUNS), "ls", "--seeds", str(seed), "--variants", variant,
                                   "--ls-steps", str(args.ls_steps), *common], 3.0))
            for heads in SPANS_HEADS:
                for alphas in ("1111", "1000"):
                    tasks.append(Task(f"spans-heads{heads}-{alphas}-seed{seed}",
                                      [py, str(PAPER_RUNS), "spans", "--seeds", str(seed), "--variants",
                                       f"heads={heads}/[{alphas}]", "--spans-steps", str(args.spans_steps), *common],
                                      2.0))
    return sorted(tasks, key=lambda t: -t.weight)


def run_all(tasks: list[Task], jobs: int, logs: Path, env: dict[str, str], deadline: float | None = None,
            t0: float | None = None) -> bool:
    """Run the tasks, ``jobs`` at a time, each writing ``logs/<name>.log``; True when all ended with 0.

    At ``deadline`` seconds after ``t0`` (``time.perf_counter()``; default now) the running tasks are stopped and
    the waiting ones dropped: the runs that finished are in the store, and the same command with the same
    ``--home`` replays them and trains only the rest."""
    logs.mkdir(parents=True, exist_ok=True)
    waiting, running = list(tasks), []
    t0 = time.perf_counter() if t0 is None else t0
    while waiting or running:
        if deadline is not None and time.perf_counter() - t0 > deadline:
            for task in running:
                task.process.terminate()
            for task in running:
                try:
                    task.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    task.process.kill()
            names = [t.name for t in running + waiting]
            print(f"[{time.perf_counter() - t0:6.0f} s] deadline: stopped or never started {len(names)} tasks "
                  f"({', '.join(names)}); run the same command with the same --home to finish them", flush=True)
            return False
        while waiting and len(running) < jobs:
            task = waiting.pop(0)
            with open(logs / f"{task.name}.log", "wb") as log:
                task.process = subprocess.Popen(task.argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
            task.started = time.perf_counter()
            running.append(task)
        time.sleep(0.5)
        for task in list(running):
            code = task.process.poll()
            if code is None:
                continue
            running.remove(task)
            task.returncode, task.seconds = code, time.perf_counter() - task.started
            print(f"[{time.perf_counter() - t0:6.0f} s] {task.name}: {'done' if code == 0 else f'FAILED ({code})'} "
                  f"in {task.seconds:.0f} s", flush=True)
            if code != 0:
                tail = (logs / f"{task.name}.log").read_text(errors="replace").splitlines()[-15:]
                print("\n".join("    " + line for line in tail), flush=True)
    return all(t.returncode == 0 for t in tasks)


def export(args: argparse.Namespace, tasks: list[Task]) -> int:
    """Check the store's runs (one code, none missing) and write the archive; 0 on success."""
    from spanviz.provenance import code_identity
    from spanviz.store import BUNDLE, ResultsStore, describe_runs

    store = ResultsStore()
    wanted = set(SWEEPS) if args.sweeps else set()
    keys, records = [], []
    for key, record in store.records():
        tags = record.config.get("tags")
        if tags is None or f"{tags.get('experiment')}/{tags.get('size')}" in wanted:
            keys.append(key)
            records.append(record)
    identity = code_identity()
    digests = {r.environment.get("source_sha256") for r in records}
    if digests != {identity["source_sha256"]}:
        print(f"refusing to export: the runs come from other code than this ({sorted(map(str, digests))})")
        return 1
    n_sweep, n_sweep_wanted = sum(1 for r in records if r.config.get("tags")), 0
    if args.sweeps:
        n_sweep_wanted = len(args.seeds) * (len(LS_VARIANTS) + 2 * len(SPANS_HEADS))
    if n_sweep != n_sweep_wanted or (args.notebooks and n_sweep == len(records)):
        print(f"refusing to export: {n_sweep} sweep runs (expected {n_sweep_wanted}) and "
              f"{len(records) - n_sweep} notebook runs in the store")
        return 1
    settings = {"sweeps": args.sweeps, "seeds": args.seeds, "ls_steps": args.ls_steps,
                "spans_steps": args.spans_steps, "notebooks": args.notebooks, "jobs": args.jobs, "smoke": args.smoke}
    about = {"made_by": "scripts/make_workshop_bundle.py", "settings": settings,  # no paths of the machine
             "made_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
             "spanviz": identity["spanviz"], "git_commit": identity["git_commit"],
             "source_sha256": identity["source_sha256"],
             "stated_commit": args.commit,
             "tasks_s": {t.name: round(t.seconds or 0.0, 1) for t in tasks}}
    out = store.export(args.out or BUNDLE, keys, about=about)
    described = describe_runs(records)
    print(f"{out}: {out.stat().st_size / 1e6:.2f} MB, {sum(store.has_weights(k) for k in keys)} with weights, "
          + json.dumps(described))
    return 0


def main(argv: list[str] | None = None) -> int:
    if str(REPO) not in sys.path[:1]:  # this checkout's spanviz, as in the child processes (PYTHONPATH below)
        sys.path.insert(0, str(REPO))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, help="the local WikiText-2 folder (valid.txt, test.txt, ...)")
    parser.add_argument("--sweeps", action="store_true", help="also train and bundle ls/gpu and spans/gpu-heads")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="sweep seeds (default 0 1 2)")
    parser.add_argument("--ls-steps", type=int, default=1000, help="updates per LS run (default 1000)")
    parser.add_argument("--spans-steps", type=int, default=1000, help="updates per spans run (default 1000)")
    parser.add_argument("--notebooks", nargs="*", default=list(NOTEBOOKS), choices=NOTEBOOKS,
                        help="whose defaults to train (default all four)")
    parser.add_argument("--jobs", type=int, default=8, help="processes at a time on the one GPU (default 8)")
    parser.add_argument("--home", type=Path, default=None,
                        help="SPANVIZ_HOME for the runs (default: a new empty folder, so nothing older gets in)")
    parser.add_argument("--results", type=Path, default=None, help="write the sweeps' summaries into this folder")
    parser.add_argument("--out", type=Path, default=None, help="the archive (default: spanviz's shipped bundle)")
    parser.add_argument("--commit", default=None, help="the commit checked out, recorded in the manifest (where "
                        "the tree is no git checkout; the source digest recorded beside it can be checked)")
    parser.add_argument("--deadline", type=float, default=None, metavar="SECONDS",
                        help="stop the tasks still running this long after the start (finished runs stay in "
                             "--home; the same command with the same --home trains only the rest)")
    parser.add_argument("--smoke", action="store_true", help="a CPU rehearsal: tiny sizes, seconds per task")
    parser.add_argument("--run-notebook", choices=NOTEBOOKS, help=argparse.SUPPRESS)  # one task (a child process)
    args = parser.parse_args(argv)

    if args.run_notebook:  # a child: the environment is set by the parent
        os.chdir(REPO / "notebooks")  # notebooks run from their folder in JupyterLab too
        (path,) = sorted((REPO / "notebooks").glob(f"{args.run_notebook}_*.ipynb"))
        run_notebook(path)
        return 0

    for flag, value, low in (("--jobs", args.jobs, 1), ("--ls-steps", args.ls_steps, 1),
                             ("--spans-steps", args.spans_steps, 1), *(("--seeds", s, 0) for s in args.seeds)):
        if value < low:  # --jobs 0 waited for a free slot forever
            parser.error(f"{flag} must be an integer >= {low}, got {value}")
    if args.deadline is not None and not (math.isfinite(args.deadline) and args.deadline > 0):
        parser.error(f"--deadline must be a number of seconds > 0, got {args.deadline}")
    if args.data_dir is None or not args.data_dir.is_dir():
        parser.error(f"--data-dir must be the local WikiText-2 folder, got {args.data_dir}")
    if args.smoke and args.out is None:
        parser.error("--smoke makes a rehearsal bundle: give --out (the shipped one is not replaced by it)")
    from spanviz.provenance import NOT_A_CHECKOUT, code_identity

    checked_out = code_identity()["git_commit"]
    if args.commit and checked_out != NOT_A_CHECKOUT and not checked_out.startswith(args.commit):
        parser.error(f"--commit {args.commit} is not the commit checked out here ({checked_out})")
    home = args.home or Path(tempfile.mkdtemp(prefix="spanviz-bundle-"))
    threads = max(1, (os.cpu_count() or 1) // max(1, args.jobs))
    env = {**os.environ, "SPANVIZ_HOME": str(home), "SPANVIZ_WIKITEXT_DIR": str(args.data_dir.resolve()),
           "SPANVIZ_TRAIN_SPLIT": "validation", "SPANVIZ_EVAL_SPLIT": "test", "SPANVIZ_BLOCKING": "1",
           "SPANVIZ_GPU_BUNDLE": "0",  # train the defaults here; never replay an older bundle
           "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("SPANVIZ_STEPS", None)
    if args.smoke:
        env["SPANVIZ_SMOKE"] = "1"
    else:
        env.pop("SPANVIZ_SMOKE", None)
    os.environ.update({k: env[k] for k in ("SPANVIZ_HOME", "SPANVIZ_WIKITEXT_DIR", "SPANVIZ_TRAIN_SPLIT",
                                           "SPANVIZ_EVAL_SPLIT")})

    from spanviz.data import OFFLINE_SPLITS, prepare_tokens

    start = time.perf_counter()
    prepare_tokens(args.data_dir, splits=OFFLINE_SPLITS, max_vocab=8192)  # once, before the processes read it
    print(f"SPANVIZ_HOME={home}; token ids ready in {time.perf_counter() - start:.0f} s", flush=True)
    tasks = plan(args)
    ok = run_all(tasks, args.jobs, home / "logs", env, args.deadline, start)
    print(f"all tasks in {time.perf_counter() - start:.0f} s", flush=True)
    if not ok:
        print(f"not all tasks finished: no bundle written (logs in {home / 'logs'})")
        return 1
    if args.sweeps and args.results is not None:
        import importlib.util

        spec = importlib.util.spec_from_file_location("gpu_paper_runs", PAPER_RUNS)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        from spanviz.store import ResultsStore

        module.summary(ResultsStore(), args.results)
    return export(args, tasks)


if __name__ == "__main__":
    sys.exit(main())
