"""Which PyTorch build the set-up installs (``scripts/torch_choice.py``, used by ``scripts/setup.sh`` and ``.ci/run``),
without downloading PyTorch: the decision for each kind of machine (a fake ``nvidia-smi`` stands in for a GPU), the
probe of PyTorch's CPU index, and — on this machine — what pip resolves the chosen arguments to (``pip install
--dry-run --report``): on Linux without an NVIDIA GPU the CPU build and not one ``nvidia-*`` package.
"""

from __future__ import annotations

import http.server
import json
import os
import platform
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "torch_choice.py"


def fake_nvidia_smi(folder: Path, gpus: list[str], status: int = 0) -> Path:
    """An ``nvidia-smi`` that lists ``gpus`` (``-L``) and exits with ``status``."""
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / "nvidia-smi"
    lines = "".join(f"echo '{g}'\n" for g in gpus)
    tool.write_text(f"#!/bin/sh\n{lines}exit {status}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return folder


def choice(*args: str, path_first: Path | None = None, **env: str) -> list[str]:
    """The script's output lines, run as setup.sh runs it (no nvidia-smi on PATH unless ``path_first`` has one)."""
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if p and not (Path(p) / "nvidia-smi").exists())
    if path_first is not None:
        path = f"{path_first}{os.pathsep}{path}"
    full = {**{k: v for k, v in os.environ.items() if k not in ("TORCH_SPEC", "SPANVIZ_TORCH_CPU_INDEX")},
            "PATH": path, **env}
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=full, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.fixture
def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/whl/cpu"  # nothing listens there once closed


@pytest.fixture
def index_server():
    """A local HTTP server standing in for PyTorch's CPU index (it answers; nothing is installed from it)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu"
    finally:
        server.shutdown()
        server.server_close()


def test_linux_without_an_nvidia_gpu_gets_the_cpu_build(tmp_path, closed_port):
    for path_first in (None, fake_nvidia_smi(tmp_path / "no-driver", [], status=9),  # tool there, no driver
                       fake_nvidia_smi(tmp_path / "no-gpu", [], status=0)):
        said, spec, *pip_args = choice("--pip", "--system", "Linux", path_first=path_first,
                                       SPANVIZ_TORCH_CPU_INDEX=closed_port)
        assert spec == "torch==2.13.0+cpu", said
        assert "no NVIDIA GPU" in said and "CPU build" in said
        # PyTorch's index unreachable (this machine, an offline one): pip's own sources, said so
        assert pip_args == ["torch==2.13.0+cpu"] and "cannot be reached" in said


def test_the_cpu_index_is_added_where_it_answers(index_server):
    said, spec, *pip_args = choice("--pip", "--system", "Linux", SPANVIZ_TORCH_CPU_INDEX=index_server)
    assert pip_args == ["torch==2.13.0+cpu", "--extra-index-url", index_server], said
    assert f"from {index_server}" in said
    said, spec = choice("--system", "Linux", SPANVIZ_TORCH_CPU_INDEX=index_server)  # no --pip: no probe, 2 lines
    assert spec == "torch==2.13.0+cpu"


def test_linux_with_an_nvidia_gpu_gets_the_cuda_build(tmp_path):
    gpu = fake_nvidia_smi(tmp_path / "gpu", ["GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"])
    said, spec, *pip_args = choice("--pip", "--system", "Linux", path_first=gpu)
    assert spec == "torch==2.13.0" and pip_args == ["torch==2.13.0"]
    assert "NVIDIA GPU found (GPU 0: NVIDIA H100 80GB HBM3" in said and "CUDA build" in said


@pytest.mark.parametrize("system", ["Darwin", "Windows"])
def test_macos_and_windows_get_the_package_index_build(system):
    said, spec, *pip_args = choice("--pip", "--system", system)
    assert spec == "torch==2.13.0" and pip_args == ["torch==2.13.0"] and system in said


def test_torch_spec_overrides_the_choice(tmp_path):
    gpu = fake_nvidia_smi(tmp_path / "gpu", ["GPU 0: NVIDIA A100"])
    wanted = "torch==2.13.0+cu128 --index-url https://download.pytorch.org/whl/cu128"
    said, spec, *pip_args = choice("--pip", "--system", "Linux", path_first=gpu, TORCH_SPEC=wanted)
    assert spec == wanted and "TORCH_SPEC" in said
    assert pip_args == ["torch==2.13.0+cu128", "--index-url", "https://download.pytorch.org/whl/cu128"]


@pytest.mark.skipif(platform.system() != "Linux", reason="the CPU build's requirement is Linux's")
def test_on_this_machine_pip_resolves_the_choice_to_the_cpu_build_without_cuda_packages(tmp_path):
    """What setup.sh would install here, resolved by pip without installing (nor downloading PyTorch, whose
    metadata pip reads from its sources)."""
    lines = choice("--pip")
    said, spec, *pip_args = lines
    if spec != "torch==2.13.0+cpu":
        pytest.skip(f"not the CPU build here: {said}")
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q",
                           "--report", str(report), *pip_args], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    resolved = {item["metadata"]["name"].lower(): item["metadata"]["version"]
                for item in json.loads(report.read_text())["install"]}
    print(f"{said}\nresolved: torch {resolved.get('torch')} with {sorted(resolved)}")
    assert resolved["torch"] == "2.13.0+cpu"
    cuda = sorted(n for n in resolved if n.startswith(("nvidia-", "cuda-", "triton")))
    assert not cuda, f"the CPU choice pulls CUDA packages: {cuda}"
