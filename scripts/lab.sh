#!/usr/bin/env bash
# The main job: set up, cache WikiText-2 tokens, open the notebooks in JupyterLab.
#   bash scripts/lab.sh           → JupyterLab on notebooks/ (port 8888); the address with its token is printed
#                                   in this terminal (a line like http://127.0.0.1:8888/lab?token=…)
#   bash scripts/lab.sh train ... → the command line instead, e.g. `bash scripts/lab.sh train --steps 300`
# JUPYTER_ARGS adds arguments for `jupyter lab`, e.g. JUPYTER_ARGS="--ip=0.0.0.0 --no-browser" in a container.
set -euo pipefail
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
spanviz prepare-data
if [ "$#" -gt 0 ]; then
  exec spanviz "$@"
fi
args=("--ServerApp.root_dir=$repo/notebooks")
if [ "$(id -u)" = 0 ]; then
  args+=("--allow-root")  # containers and cloud notebooks run as root; Jupyter refuses that unless told
fi
echo "JupyterLab starts: open the address with its token printed below, then 00_tour.ipynb → Run → Run All Cells." >&2
# shellcheck disable=SC2086
exec jupyter lab "${args[@]}" ${JUPYTER_ARGS:-}
