#!/usr/bin/env bash
# Shared set-up for scripts/lab.sh and scripts/test.sh: a virtual environment with PyTorch and spanviz.
# Sourced, not run. Honours an already active virtual environment; otherwise makes and uses ./.venv.
# TORCH_SPEC picks the PyTorch build (default: the CPU wheel torch==2.13.0). It is installed *before*
# spanviz, because a bare `torch` requirement with no torch present pulls several GB of CUDA packages.
# pip runs only when something it installs changed since the last set-up of this environment (pyproject.toml,
# the extras, TORCH_SPEC) or spanviz is not installed from this checkout; code changes need nothing (the
# install is editable). A second start is a matter of seconds.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -z "${VIRTUAL_ENV:-}" ]; then
  [ -x "$repo/.venv/bin/python" ] || python3 -m venv "$repo/.venv"
  # shellcheck disable=SC1091
  . "$repo/.venv/bin/activate"
fi
extras="${SPANVIZ_EXTRAS:-}"
stamp="$VIRTUAL_ENV/.spanviz-setup${extras//[^a-z]/-}"  # one per set of extras: .spanviz-setup, .spanviz-setup-test-
wanted="$(sha256sum "$repo/pyproject.toml" | cut -d' ' -f1) torch=${TORCH_SPEC:-torch==2.13.0}"
installed_here() {  # spanviz importable from this checkout (without importing it: no torch start-up cost)
  python - "$repo" <<'PY'
import importlib.util, os, sys
spec = importlib.util.find_spec("spanviz")
sys.exit(not (spec and spec.origin and os.path.realpath(spec.origin).startswith(os.path.realpath(sys.argv[1]) + os.sep)))
PY
}
if [ "$(cat "$stamp" 2>/dev/null)" = "$wanted" ] && installed_here; then
  echo "set-up: $VIRTUAL_ENV is up to date (nothing to install)" >&2
else
  echo "set-up: installing into $VIRTUAL_ENV (PyTorch first: ${TORCH_SPEC:-torch==2.13.0}, then spanviz$extras)" >&2
  python -m pip install -q --upgrade pip
  python -c "import torch" 2>/dev/null || python -m pip install -q "${TORCH_SPEC:-torch==2.13.0}"
  python -m pip install -q -e "$repo$extras"
  echo "$wanted" > "$stamp"
fi
# WikiText-2: a local folder wins over the Hugging Face hub. On the team's machines the validation and test
# splits sit in ../shared/data/wikitext-2 (no train split: train on validation, evaluate on test).
if [ -z "${SPANVIZ_WIKITEXT_DIR:-}" ] && [ -d "$repo/../shared/data/wikitext-2" ]; then
  export SPANVIZ_WIKITEXT_DIR="$repo/../shared/data/wikitext-2"
  export SPANVIZ_TRAIN_SPLIT="${SPANVIZ_TRAIN_SPLIT:-validation}" SPANVIZ_EVAL_SPLIT="${SPANVIZ_EVAL_SPLIT:-test}"
fi
