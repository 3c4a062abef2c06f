#!/usr/bin/env bash
# All tests: set up (venv, CPU torch, spanviz[test], Chromium and Firefox for the browser tests), the import-layer
# contracts (lint-imports), then pytest.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k spans -x`.
set -euo pipefail
SPANVIZ_EXTRAS="[test]"
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# Debian's browsers for the browser tests: Chromium (all of them) and Firefox ESR (the static site's).
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v firefox-esr >/dev/null 2>&1 || command -v firefox >/dev/null 2>&1 || missing+=(firefox-esr)
if [ "${#missing[@]}" -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
cd "$repo"
# The Firefox driver (puppeteer-core, pinned in tests/browser/firefox/package-lock.json; no browser is downloaded).
# Without Node.js or the npm registry its test skips, saying why.
if command -v npm >/dev/null 2>&1 && [ ! -d tests/browser/firefox/node_modules/puppeteer-core ]; then
  PUPPETEER_SKIP_DOWNLOAD=1 npm ci --prefix tests/browser/firefox --no-audit --no-fund --loglevel=error >/dev/null \
    || echo "test.sh: the Firefox driver did not install (npm ci failed); tests/browser/test_site_firefox.py will skip"
fi
# The layer order (pyproject.toml [tool.importlinter]): settings → cores → model → probes → train → ... → cli.
lint-imports --no-cache
exec python -m pytest "$@"
