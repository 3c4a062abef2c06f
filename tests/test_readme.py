"""Every command in the README's code blocks, run as written in a shell where only the virtual environment is active.

No data variables and no scripts: the shell has the venv's ``bin`` on ``PATH``, ``VIRTUAL_ENV``, a fresh
``SPANVIZ_HOME``, and ``SPANVIZ_SMOKE=1`` (the documented switch that makes each ``spanviz`` command a
seconds-long version of itself). The one set-up step is the one the README gives in prose for a local copy of
WikiText-2: ``spanviz prepare-data --data-dir DIR --train-split validation --eval-split test``, after which the
README's lines find the data without flags. ``spanviz ...`` lines run in a scratch folder, in README order
(later lines use what earlier ones wrote, e.g. ``runs/demo``); ``bash scripts/...`` lines run in the repository.
``bash scripts/lab.sh`` starts JupyterLab, which never exits by itself: it passes when the server answers, and
is then stopped. ``bash scripts/test.sh`` would run this very suite: ``PYTEST_ADDOPTS`` narrows it to one
small test file.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def readme_commands() -> list[str]:
    """The command lines of the README's ``bash`` code blocks, comments stripped, in order."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S):
        for line in block.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def venv_shell_env(home: Path) -> dict[str, str]:
    """A shell with only the virtual environment active: its bin first on PATH, nothing spanviz-specific."""
    venv_bin = Path(sys.executable).parent
    keep = {k: v for k, v in os.environ.items() if k in ("HOME", "LANG", "LC_ALL", "TERM", "USER", "TMPDIR")}
    return {**keep, "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin", "VIRTUAL_ENV": sys.prefix,
            "SPANVIZ_HOME": str(home), "SPANVIZ_SMOKE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_lab(command: str, env: dict[str, str]) -> tuple[int, str]:
    """Start ``bash scripts/lab.sh``; 0 once JupyterLab answers on its port, else its exit status / 1."""
    port = free_port()
    root = " --allow-root" if os.geteuid() == 0 else ""  # CI containers run as root; Jupyter refuses without it
    env = {**env, "JUPYTER_ARGS": f"--no-browser --port={port} --ServerApp.port_retries=0{root}"}
    log = Path(env["SPANVIZ_HOME"]) / "lab.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(["bash", "-c", command], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return proc.returncode or 1, log.read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api", timeout=2) as answer:
                    if answer.status == 200:
                        return 0, log.read_text()[-3000:]
            except OSError:
                time.sleep(0.5)
        return 1, "JupyterLab did not answer within 600 s\n" + log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def test_the_readme_has_the_commands_it_promises():
    commands = readme_commands()
    assert "bash scripts/lab.sh" in commands and "bash scripts/test.sh" in commands
    for name in ("prepare-data", "train", "sweep", "runs", "bench"):
        assert any(c.startswith(f"spanviz {name}") for c in commands), name
    assert any(c.startswith("python -m spanviz") for c in commands)


@pytest.mark.slow
def test_every_readme_command_runs_as_written(wikitext_dir, tmp_path):
    home, scratch = tmp_path / "home", tmp_path / "work"
    scratch.mkdir()
    env = venv_shell_env(home)
    setup = subprocess.run(["spanviz", "prepare-data", "--data-dir", str(wikitext_dir), "--train-split",
                            "validation", "--eval-split", "test"], cwd=scratch, env=env, capture_output=True,
                           text=True, timeout=600)
    assert setup.returncode == 0, setup.stderr
    failures = []
    for command in readme_commands():
        if command.startswith("bash scripts/lab.sh"):
            rc, output = run_lab(command, env)
        else:
            in_repo = command.startswith("bash scripts/")
            extra = {"PYTEST_ADDOPTS": "tests/test_model.py -q -p no:cacheprovider"} if "test.sh" in command else {}
            done = subprocess.run(["bash", "-c", command], cwd=REPO if in_repo else scratch, env={**env, **extra},
                                  capture_output=True, text=True, timeout=600)
            rc, output = done.returncode, (done.stdout + done.stderr)[-3000:]
        if rc != 0 or "Traceback" in output:
            failures.append(f"$ {command}\n(exit {rc})\n{output}")
    assert not failures, "\n\n".join(failures)
    assert (scratch / "runs" / "demo" / "checkpoint.pt").is_file() and (scratch / "workshop.zip").is_file()
