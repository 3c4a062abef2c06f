#!/usr/bin/env bash
# Shared set-up for scripts/lab.sh and scripts/test.sh: a virtual environment with PyTorch and spanviz.
# Sourced, not run. Honours an already active virtual environment; otherwise makes and uses ./.venv.
# PyTorch is installed *before* spanviz, because a bare `torch` requirement with no torch present pulls the CUDA
# build on Linux (several GB of nvidia-* packages). Which build: scripts/torch_choice.py decides and says why —
# Linux without an NVIDIA GPU: the CPU build torch==2.13.0+cpu from PyTorch's CPU wheel index (or pip's own
# sources where that index cannot be reached); Linux with one: the CUDA build; macOS/Windows: the Package Index's.
# TORCH_SPEC overrides it: a requirement, optionally with pip options, e.g.
#   TORCH_SPEC="torch==2.13.0+cu128 --index-url https://download.pytorch.org/whl/cu128" bash scripts/lab.sh
# pip runs only when something it installs changed since the last set-up of this environment (pyproject.toml,
# the extras, the PyTorch choice) or spanviz is not installed from this checkout; code changes need nothing (the
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
mapfile -t torch_choice < <(python3 "$repo/scripts/torch_choice.py")  # [0] what and why, [1] the requirement
wanted="$(sha256sum "$repo/pyproject.toml" | cut -d' ' -f1) torch=${torch_choice[1]}"
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
  echo "set-up: installing into $VIRTUAL_ENV (PyTorch first, then spanviz$extras)" >&2
  python -m pip install -q --upgrade pip
  if python -c "import torch" 2>/dev/null; then
    echo "set-up: ${torch_choice[0]}" >&2
    echo "set-up: PyTorch $(python -c 'import torch; print(torch.__version__)') is installed in $VIRTUAL_ENV already:" \
         "kept (remove $VIRTUAL_ENV to start over)" >&2
  else
    mapfile -t torch_choice < <(python3 "$repo/scripts/torch_choice.py" --pip)  # [2:] the pip arguments
    echo "set-up: ${torch_choice[0]}" >&2
    python -m pip install -q "${torch_choice[@]:2}" || {
      echo "set-up: pip could not install ${torch_choice[1]}; set TORCH_SPEC to a PyTorch build your pip can" \
           "reach, e.g. TORCH_SPEC=torch==2.13.0 (the Package Index's build) — see scripts/setup.sh" >&2
      exit 1
    }
  fi
  python -m pip install -q -e "$repo$extras"
  echo "$wanted" > "$stamp"
fi
# WikiText-2: a local folder wins over the Hugging Face hub. On the team's machines the validation and test
# splits sit in ../shared/data/wikitext-2 (no train split: train on validation, evaluate on test).
if [ -z "${SPANVIZ_WIKITEXT_DIR:-}" ] && [ -d "$repo/../shared/data/wikitext-2" ]; then
  export SPANVIZ_WIKITEXT_DIR="$repo/../shared/data/wikitext-2"
  export SPANVIZ_TRAIN_SPLIT="${SPANVIZ_TRAIN_SPLIT:-validation}" SPANVIZ_EVAL_SPLIT="${SPANVIZ_EVAL_SPLIT:-test}"
fi
