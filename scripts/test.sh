#!/usr/bin/env bash
# All tests: set up (venv, CPU torch, spanviz[test], Chromium for the browser tests), the import-layer
# contracts (lint-imports), then pytest.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k spans -x`.
set -euo pipefail
SPANVIZ_EXTRAS="[test]"
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
cd "$repo"
# The layer order (pyproject.toml [tool.importlinter]): settings → cores → model → probes → train → ... → cli.
lint-imports --no-cache
exec python -m pytest "$@"
