#!/usr/bin/env bash
# The main job: set up, cache WikiText-2 tokens, open the notebooks in JupyterLab.
#   bash scripts/lab.sh                   → JupyterLab on notebooks/ (port 8888); the address with its token is
#                                           printed in this terminal (a line like http://127.0.0.1:8888/lab?token=…)
#   bash scripts/lab.sh voila [NOTEBOOK]  → the notebooks as a web app (Voilà: code hidden, the panels and the
#                                           text only), e.g. `bash scripts/lab.sh voila 01_spans_and_violations`;
#                                           behind a token like JupyterLab (the printed address carries it)
#   bash scripts/lab.sh COMMAND ...       → the `spanviz` command line instead, without activating .venv, e.g.
#                                           `bash scripts/lab.sh prepare-data --data-dir DIR` or `... train --steps 300`
# JUPYTER_ARGS adds arguments for `jupyter lab` / `voila`, e.g. JUPYTER_ARGS="--ip=0.0.0.0 --no-browser" in a
# container.
set -euo pipefail
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# Messages that name a command to type give this one (it works without an active virtual environment).
if [ "$(pwd -P)" = "$(cd "$repo" && pwd -P)" ]; then
  export SPANVIZ_COMMAND="bash scripts/lab.sh"
else
  export SPANVIZ_COMMAND="bash $(printf %q "$repo/scripts/lab.sh")"
fi
mode="lab"
if [ "$#" -gt 0 ] && [ "$1" = "voila" ]; then
  mode="voila"
  shift
elif [ "$#" -gt 0 ]; then
  exec spanviz "$@"  # the command line: its own flags decide where the data come from
fi
# WikiText-2 token ids for the notebooks (a cache hit after the first time).
if ! spanviz prepare-data; then
  again="$SPANVIZ_COMMAND"
  [ "$mode" = "lab" ] || again+=" voila${1:+ $1}"
  echo "lab.sh: the notebooks need WikiText-2 first: run the command the line above names, then $again" >&2
  exit 2
fi
if [ "$mode" = "voila" ]; then
  notebook="${1:-}"
  if [ -n "$notebook" ]; then
    notebook="$(basename "${notebook%.ipynb}").ipynb"
    [ -f "$repo/notebooks/$notebook" ] || {
      echo "lab.sh voila: no notebook $notebook in $repo/notebooks; there are:" \
           "$(cd "$repo/notebooks" && ls ./*.ipynb | sed 's|^\./||' | tr '\n' ' ')" >&2
      exit 2
    }
  fi
  echo "Voilà starts: open the address with its token printed below (each notebook runs when its page opens: the" \
       "panels appear as its cells finish)." >&2
  # JUPYTER_ARGS as for JupyterLab: Voilà spells --ip as --Voila.ip and has no --allow-root (it runs as root).
  vargs=()
  for arg in ${JUPYTER_ARGS:-}; do
    case "$arg" in
      --ip=*) vargs+=("--Voila.ip=${arg#--ip=}") ;;
      --allow-root) ;;
      *) vargs+=("$arg") ;;
    esac
  done
  # spanviz's template (scripts/voila/templates/spanviz): Voilà's lab template without its Font Awesome style sheets
  # from a CDN (offline, each was a console error; Voilà's own bundle has the icons)
  export JUPYTER_PATH="$repo/scripts${JUPYTER_PATH:+:$JUPYTER_PATH}"
  cd "$repo/notebooks"
  # --token: a generated token, printed in the address (http://localhost:8866/?token=…), as JupyterLab does. Without
  # it Voilà answers anyone who reaches the port and runs the notebooks for them (with --ip=0.0.0.0 in a container,
  # the whole network); Voilà has no Host check (it sets allow_remote_access), so the token is the guard.
  exec voila ${notebook:+"$notebook"} --template=spanviz --token "${vargs[@]}"
fi
args=()
if [ "$(id -u)" = 0 ]; then
  args+=("--allow-root")  # containers and cloud notebooks run as root; Jupyter refuses that unless told
fi
# Voilà's server extension (for Binder's voila/render links) is not needed here — `lab.sh voila` runs Voilà itself —
# and loading it makes the server print a deprecation warning at every start.
args+=("--ServerApp.jpserver_extensions=voila.server_extension=False")
# JupyterLab's defaults for this repository (scripts/jupyterlab/settings/overrides.json): no "official Jupyter news?"
# toast over the figures on the first start, no news fetched, no update check (a workshop may be offline).
args+=("--LabApp.app_settings_dir=$repo/scripts/jupyterlab/settings")
echo "JupyterLab starts: open the address with its token printed below, then 00_tour.ipynb → Run → Run All Cells." >&2
# shellcheck disable=SC2086
exec jupyter lab "--ServerApp.root_dir=$repo/notebooks" "${args[@]}" ${JUPYTER_ARGS:-}
