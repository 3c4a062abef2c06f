#!/usr/bin/env bash
# Shared set-up for scripts/lab.sh and scripts/test.sh: a virtual environment with PyTorch and spanviz.
# Sourced, not run. Honours an already active virtual environment; otherwise makes and uses ./.venv.
# TORCH_SPEC picks the PyTorch build (default: the CPU wheel torch==2.13.0). It is installed *before*
# spanviz, because a bare `torch` requirement with no torch present pulls several GB of CUDA packages.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -z "${VIRTUAL_ENV:-}" ]; then
  [ -x "$repo/.venv/bin/python" ] || python3 -m venv "$repo/.venv"
  # shellcheck disable=SC1091
  . "$repo/.venv/bin/activate"
fi
python -m pip install -q --upgrade pip
python -c "import torch" 2>/dev/null || python -m pip install -q "${TORCH_SPEC:-torch==2.13.0}"
python -m pip install -q -e "$repo${SPANVIZ_EXTRAS:-}"
# WikiText-2: a local folder wins over the Hugging Face hub. On the team's machines the validation and test
# splits sit in ../shared/data/wikitext-2 (no train split: train on validation, evaluate on test).
if [ -z "${SPANVIZ_WIKITEXT_DIR:-}" ] && [ -d "$repo/../shared/data/wikitext-2" ]; then
  export SPANVIZ_WIKITEXT_DIR="$repo/../shared/data/wikitext-2"
  export SPANVIZ_TRAIN_SPLIT="${SPANVIZ_TRAIN_SPLIT:-validation}" SPANVIZ_EVAL_SPLIT="${SPANVIZ_EVAL_SPLIT:-test}"
fi
