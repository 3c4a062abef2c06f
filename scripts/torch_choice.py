"""Which PyTorch build the set-up installs (scripts/setup.sh), and why — decided without downloading anything.

    python3 scripts/torch_choice.py          → line 1: what was chosen and why (for the terminal);
                                               line 2: the requirement (the set-up's record of what it installed)
    python3 scripts/torch_choice.py --pip    → the same two lines, then the arguments of `pip install`, one a line

The rule (``TORCH_SPEC`` overrides it: a requirement, optionally followed by pip options, e.g.
``TORCH_SPEC="torch==2.13.0+cu128 --index-url https://download.pytorch.org/whl/cu128"``):

* Linux with an NVIDIA GPU (``nvidia-smi -L`` lists one): ``torch==2.13.0`` from the Python Package Index, whose
  Linux wheel is the CUDA build (it brings its ``nvidia-*`` packages).
* Linux without one: the CPU build, ``torch==2.13.0+cpu``, from PyTorch's CPU wheel index
  (https://download.pytorch.org/whl/cpu, added to pip's own sources with ``--extra-index-url``). On the Package
  Index itself the Linux wheel is the CUDA build: several GB of ``nvidia-*`` packages a CPU cannot use. When
  PyTorch's index cannot be reached (an offline machine whose pip is served from a local mirror or wheel folder,
  see ``pip config list``), pip looks for ``torch==2.13.0+cpu`` in its configured sources alone.
* macOS and Windows: ``torch==2.13.0`` from the Package Index, which is the CPU build there (with MPS on Apple
  silicon).

Standard library only: it runs before the virtual environment has anything installed.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

TORCH_VERSION = "2.13.0"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PROBE_TIMEOUT_S = 3.0


def nvidia_gpus(timeout: float = 10.0) -> list[str]:
    """The NVIDIA GPUs ``nvidia-smi -L`` lists (one line each); empty without the tool, a driver or a GPU."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return []
    try:
        done = subprocess.run([tool, "-L"], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode != 0:
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("GPU ")]


def choose(system: str, gpus: list[str], torch_spec: str | None = None) -> tuple[str, list[str], bool, str]:
    """The build for a machine: ``(what to install, its pip arguments, wants the CPU index, reason)``.

    ``what to install`` is the requirement (``TORCH_SPEC`` as given, when set); the set-up records it, so a change
    of choice installs again.

    Args:
        system: ``platform.system()`` ("Linux", "Darwin", "Windows").
        gpus: :func:`nvidia_gpus` of the machine.
        torch_spec: ``$TORCH_SPEC`` (a requirement, optionally followed by pip options), or None/empty.
    """
    if torch_spec and torch_spec.strip():
        return torch_spec.strip(), shlex.split(torch_spec), False, "TORCH_SPEC is set"
    if system == "Linux" and gpus:
        return (f"torch=={TORCH_VERSION}", [f"torch=={TORCH_VERSION}"], False,
                f"NVIDIA GPU found ({gpus[0]}): the CUDA build from the Python Package Index")
    if system == "Linux":
        return (f"torch=={TORCH_VERSION}+cpu", [f"torch=={TORCH_VERSION}+cpu"], True,
                "no NVIDIA GPU found (`nvidia-smi -L` is missing or lists none): the CPU build, without CUDA packages")
    return (f"torch=={TORCH_VERSION}", [f"torch=={TORCH_VERSION}"], False,
            f"{system}: the Python Package Index's build (CPU{', MPS' if system == 'Darwin' else ''})")


def reachable(url: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether ``url`` answers at all within ``timeout`` seconds (any HTTP status counts; pip's proxy settings
    in the environment are honoured by urllib)."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pip", action="store_true", help="also print the pip arguments (probes PyTorch's index)")
    parser.add_argument("--system", default=platform.system(), help=argparse.SUPPRESS)  # tests
    args = parser.parse_args(argv)
    spec, pip_args, cpu_index, reason = choose(args.system, nvidia_gpus(), os.environ.get("TORCH_SPEC"))
    index = os.environ.get("SPANVIZ_TORCH_CPU_INDEX", CPU_INDEX)  # tests point it elsewhere
    if args.pip and cpu_index:
        if reachable(index):
            pip_args += ["--extra-index-url", index]
            reason += f", from {index}"
        else:
            reason += (f"; {index} cannot be reached, so pip looks for it in its own sources "
                       "(`pip config list`: a local mirror or wheel folder)")
    print(f"PyTorch: {spec} — {reason}")
    print(spec)
    if args.pip:
        print("\n".join(pip_args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
