"""A new user's first start, offline, from a fresh clone with no ``../shared`` beside it — following only what the
README and the errors say (issue 21, item 2).

The clone is a copy of the repository's files in a temporary folder. The person has their own copy of WikiText-2
(the validation and test splits, copied to another temporary folder) and no network: the Hugging Face hub is an
address nothing answers on, and the Hugging Face cache is empty. The shell has no virtual environment active and no
spanviz variable. To keep the test within minutes, the clone's ``.venv`` is made beforehand with this test
environment's packages visible (a ``.pth`` file), so its set-up installs only spanviz itself, from the clone.

1. ``bash scripts/lab.sh`` fails within seconds of the set-up, and its error names a command to type;
2. that command, with DIR replaced by the data folder and nothing else changed, succeeds;
3. ``bash scripts/lab.sh`` now reaches JupyterLab (it answers on its port);
4. the README's other ways work as written: ``SPANVIZ_WIKITEXT_DIR=DIR bash scripts/lab.sh prepare-data`` (a
   folder without a train split trains on validation, evaluates on test, and says so) and, with ``.venv``
   activated as the README says, ``spanviz runs list``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clone(dest: Path) -> Path:
    """The repository's files (tracked, and new ones git does not ignore) copied to ``dest``, as a clone has them."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def new_user_env(tmp: Path) -> dict[str, str]:
    """A shell with nothing active: the system PATH, a fresh spanviz and Hugging Face home, an unreachable hub."""
    keep = {k: v for k, v in os.environ.items() if k in ("HOME", "LANG", "LC_ALL", "TERM", "USER", "TMPDIR")
            or k.startswith("PIP_")}
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p and p != venv_bin)
    dead = _free_port()  # nothing listens there: "no network" for the hub, failing at once as offline DNS does
    return {**keep, "PATH": path, "SPANVIZ_HOME": str(tmp / "spanviz-home"), "HF_HOME": str(tmp / "hf-home"),
            "HF_ENDPOINT": f"http://127.0.0.1:{dead}", "PYTHONUNBUFFERED": "1"}


def prepared_venv(repo: Path) -> None:
    """``repo/.venv`` with this environment's packages visible, so the set-up installs only spanviz."""
    subprocess.run([sys.executable, "-m", "venv", str(repo / ".venv")], check=True)
    site = Path(subprocess.run([str(repo / ".venv" / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "_spanviz_test_base.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # The commands those packages install (jupyter, voila), pointed at the new environment's Python.
    python = repo / ".venv" / "bin" / "python"
    for script in Path(sys.executable).parent.iterdir():
        if script.name.startswith(("jupyter", "voila")) and script.is_file():
            lines = script.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
            if lines and lines[0].startswith("#!"):
                target = repo / ".venv" / "bin" / script.name
                target.write_text(f"#!{python}\n" + "".join(lines[1:]), encoding="utf-8")
                target.chmod(0o755)


def shell(command: str, cwd: Path, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def reaches_jupyterlab(cwd: Path, env: dict[str, str], log: Path) -> tuple[bool, str]:
    port = _free_port()
    root = " --allow-root" if os.geteuid() == 0 else ""
    env = {**env, "JUPYTER_ARGS": f"--no-browser --port={port} --ServerApp.port_retries=0{root}",
           "JUPYTER_CONFIG_DIR": str(log.parent / "jupyter-config"),
           "JUPYTER_RUNTIME_DIR": str(log.parent / "jupyter-runtime")}
    with open(log, "w") as out:
        proc = subprocess.Popen(["bash", "scripts/lab.sh"], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False, log.read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api", timeout=2) as answer:
                    if answer.status == 200:
                        return True, log.read_text()[-3000:]
            except OSError:
                time.sleep(0.5)
        return False, "JupyterLab did not answer within 600 s\n" + log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_offline_first_start_from_a_fresh_clone_follows_the_errors(wikitext_dir, tmp_path):
    repo = clone(tmp_path / "clone" / "spanviz")
    assert not (repo.parent / "shared").exists()
    data = tmp_path / "Downloads" / "wikitext-2"
    shutil.copytree(wikitext_dir, data)  # the person's own copy: validation and test only
    for path in data.rglob("*"):
        path.chmod(0o644 if path.is_file() else 0o755)
    env = new_user_env(tmp_path)
    prepared_venv(repo)

    # 1. The README's first command, offline, with no data: an error that names what to type.
    t0 = time.monotonic()
    first = shell("bash scripts/lab.sh", repo, env)
    output = first.stdout + first.stderr
    assert first.returncode != 0, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    commands = re.findall(r"bash scripts/lab\.sh prepare-data --data-dir DIR(?: --[a-z-]+ [a-z]+)*", output)
    assert commands, f"the error names no command to type:\n{output[-3000:]}"
    print(f"first start failed after {time.monotonic() - t0:.0f} s (set-up included), naming: {commands[0]}")

    # 2. That command as typed, DIR being the person's folder.
    typed = commands[0].replace("DIR", str(data))
    second = shell(typed, repo, env)
    assert second.returncode == 0, f"$ {typed}\n{second.stdout}{second.stderr}"
    assert "splits {'train': 'validation', 'eval': 'test'}" in second.stdout, second.stdout

    # 3. The README's first command again: JupyterLab.
    ok, log = reaches_jupyterlab(repo, env, tmp_path / "lab.log")
    assert ok, log
    assert "installing" not in log, "the second start installed something again"

    # 4. The other ways the README gives.
    by_env = shell(f"SPANVIZ_WIKITEXT_DIR={data} bash scripts/lab.sh prepare-data", repo, env)
    assert by_env.returncode == 0, by_env.stdout + by_env.stderr
    assert "has no train split: training on 'validation', evaluating on 'test'" in by_env.stderr
    readme = README.read_text(encoding="utf-8")
    activate = re.search(r"`(\. \.venv/bin/activate|source \.venv/bin/activate)`", readme)
    assert activate, "the README does not say how to activate .venv"
    listed = shell(f"{activate.group(1)} && spanviz runs list", repo, env, timeout=300)
    assert listed.returncode == 0 and "runs in" in listed.stdout, listed.stdout + listed.stderr
