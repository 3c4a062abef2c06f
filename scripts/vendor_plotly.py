"""Refresh the partial plotly.js builds in spanviz/widgets/figure/static/vendor/ from the npm registry.

    python scripts/vendor_plotly.py            # the plotly.js version the installed plotly.py bundles
    python scripts/vendor_plotly.py 4.2.0      # another version

The builds are the official ``plotly.js-cartesian-dist-min`` and ``plotly.js-gl3d-dist-min`` packages (``npm pack``,
nothing built here); spanviz uses them only while their version equals the plotly.js that the installed plotly.py
bundles (spanviz.widgets.figure.plotly_js), so run this after upgrading plotly, then the tests
(tests/browser/test_plotly_builds.py checks each build's trace types in a browser). Writes the two files, their
licence and vendor/README.md (versions and sha256).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from plotly.offline import get_plotlyjs_version

VENDOR = Path(__file__).resolve().parents[1] / "spanviz" / "widgets" / "figure" / "static" / "vendor"
PACKAGES = {"cartesian": "plotly.js-cartesian-dist-min", "gl3d": "plotly.js-gl3d-dist-min"}


def main() -> None:
    version = sys.argv[1] if len(sys.argv) > 1 else get_plotlyjs_version()
    lines = [f"# plotly.js {version}, partial builds", "",
             "Written by `python scripts/vendor_plotly.py`; used by `spanviz.widgets.figure.plotly_js` only while this",
             "version equals the plotly.js of the installed plotly.py (else the full plotly.min.js of plotly.py).", "",
             "| file | npm package | sha256 |", "|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for build, package in PACKAGES.items():
            out = subprocess.run(["npm", "pack", f"{package}@{version}", "--silent"], cwd=tmp, check=True,
                                 capture_output=True, text=True).stdout.split()[-1]
            with tarfile.open(Path(tmp) / out) as tar:
                name = f"plotly-{build}.min.js"
                text = tar.extractfile(f"package/{name}").read()
                licence = tar.extractfile("package/LICENSE").read()
            (VENDOR / name).write_bytes(text)
            lines.append(f"| {name} | {package}@{version} | {hashlib.sha256(text).hexdigest()} |")
    (VENDOR / "LICENSE-plotly.js.txt").write_bytes(licence)
    (VENDOR / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
