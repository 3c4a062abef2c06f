"""Which code made a result: the spanviz version, the git commit and a digest of the library's source.

Every run record carries these (:func:`code_identity`, in ``RunRecord.environment``), so a curve can be traced
to the code that drew it:

* ``spanviz`` — the installed distribution's version, else ``spanviz.__version__`` (a source tree on
  ``PYTHONPATH``);
* ``git_commit`` — the commit of the checkout the package was imported from, with ``git_dirty`` (tracked
  files changed since that commit), or the words :data:`NOT_A_CHECKOUT` (an installed wheel, a copied tree);
* ``source_sha256`` — :func:`source_digest`: a sha256 over the package's ``.py`` files (relative path and
  bytes). It identifies the code where no git history travels (a copy sent to a GPU machine): check it against
  a commit with :func:`source_digest_at`.

Nothing here holds a path of the machine. Read once per process (the code a process runs is what it imported).
Source: spanviz.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
"""The spanviz package folder this module was imported from."""
NOT_A_CHECKOUT = "not a git checkout"
GIT_TIMEOUT_S = 10.0


def spanviz_version() -> str:
    """The installed distribution's version, else the package's ``__version__`` (never "unknown")."""
    try:
        return version("spanviz")
    except PackageNotFoundError:
        from spanviz import __version__

        return __version__


def _git(*args: str, cwd: Path) -> str | None:
    """``git args`` in ``cwd``: its stripped output, or None when git is missing or fails."""
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_commit(package: Path = PACKAGE) -> tuple[str, bool | None]:
    """``(commit, dirty)`` of the git checkout whose top level holds ``package`` (dirty: a tracked file differs
    from the commit, or the package has a file git does not know); ``(NOT_A_CHECKOUT, None)`` when
    the package is not the ``spanviz/`` folder of a checkout (an installed wheel inside some other repository
    counts as none) or git is unavailable."""
    top = _git("rev-parse", "--show-toplevel", cwd=package)
    if top is None or Path(top).resolve() != package.parent:
        return NOT_A_CHECKOUT, None
    commit = _git("rev-parse", "HEAD", cwd=package)
    if commit is None:
        return NOT_A_CHECKOUT, None
    changed = _git("status", "--porcelain", "--untracked-files=no", cwd=package)  # tracked files, anywhere
    added = _git("ls-files", "--others", "--exclude-standard", cwd=package)  # new files of the package
    if changed is None or added is None:
        return commit, None
    return commit, bool(changed or added)


def _digest(files: list[tuple[str, bytes]]) -> str:
    digest = hashlib.sha256()
    for name, payload in sorted(files):
        digest.update(name.encode("utf-8") + b"\0" + str(len(payload)).encode("ascii") + b"\0")
        digest.update(payload)
    return digest.hexdigest()


def source_digest(package: Path = PACKAGE) -> str:
    """sha256 over the package's ``.py`` files: for each, sorted by its path relative to the package's parent
    (``spanviz/...``, forward slashes), the path, its length and its bytes."""
    root = package.parent
    return _digest([(p.relative_to(root).as_posix(), p.read_bytes()) for p in package.rglob("*.py")
                    if "__pycache__" not in p.parts])


def source_digest_at(commit: str, repo: Path) -> str | None:
    """:func:`source_digest` of ``spanviz/`` as committed in ``commit`` of the git repository ``repo``; None
    when git or the commit is not available there."""
    listing = _git("ls-tree", "-r", "--name-only", commit, "--", "spanviz", cwd=repo)
    if listing is None:
        return None
    files = []
    for name in listing.splitlines():
        if not name.endswith(".py"):
            continue
        try:
            payload = subprocess.run(["git", "show", f"{commit}:{name}"], cwd=repo, capture_output=True,
                                     timeout=GIT_TIMEOUT_S, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        files.append((name, payload))
    return _digest(files)


@functools.lru_cache(maxsize=1)
def code_identity() -> dict[str, object]:
    """``{"spanviz": version, "git_commit": sha or NOT_A_CHECKOUT, "git_dirty": bool or None,
    "source_sha256": hex}`` of the code this process imported (computed once)."""
    commit, dirty = git_commit()
    return {"spanviz": spanviz_version(), "git_commit": commit, "git_dirty": dirty,
            "source_sha256": source_digest()}
