#!/usr/bin/env bash
# The main job: set up, cache WikiText-2 tokens, open the notebooks in JupyterLab.
#   bash scripts/lab.sh           → JupyterLab on notebooks/ (port 8888)
#   bash scripts/lab.sh train ... → the command line instead, e.g. `bash scripts/lab.sh train --steps 300`
set -euo pipefail
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
spanviz prepare-data
if [ "$#" -gt 0 ]; then
  exec spanviz "$@"
fi
# shellcheck disable=SC2086
exec jupyter lab --notebook-dir="$repo/notebooks" ${JUPYTER_ARGS:-}
