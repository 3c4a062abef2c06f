"""The package's shape: checks that read the source, not the behaviour.

- no private name (``_x``) is imported from another file of ``spanviz/``, nor reached through a module alias;
- the three technique packages share one template (``core.py``, ``probe.py``, ``demos.py``);
- ``spanviz.cli`` exports ``main`` only;
- a warning above 300 code lines per file (docstrings and comments are free): a question about responsibilities,
  not a cap; ``fp8/core.py``, the file that *is* the technique, at most 300;
- the package-level layer contract (pyproject ``[tool.importlinter]``) places every module by its package and
  fails on a planted upward import;
- README.md, docs/*.md and the notebooks name only what a package face exports (``__all__``), or public names of
  a plain module.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "spanviz"
SOURCES = sorted(PACKAGE.rglob("*.py"))
TECHNIQUES = ("spans", "local_global", "fp8")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def absolute(node: ast.ImportFrom, path: Path) -> str:
    """The module an ``ImportFrom`` names, with relative imports resolved against ``path``."""
    if not node.level:
        return node.module or ""
    base = module_name(path).split(".")
    if path.name != "__init__.py":
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def private_reaches(path: Path) -> list[str]:
    """``from spanviz.x import _y`` and ``alias._y`` where ``alias`` is a spanviz module imported in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found, aliases = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = absolute(node, path)
            if not source.startswith("spanviz"):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno} imports {source}.{alias.name}")
                elif _is_package(source) and find_spec(f"{source}.{alias.name}") is not None:
                    aliases.add(alias.asname or alias.name)  # a module: ``from spanviz import model``
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("spanviz"):
                    aliases.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name) and node.value.id in aliases):
            found.append(f"{path.relative_to(REPO)}:{node.lineno} reaches {node.value.id}.{node.attr}")
    return found


def find_spec(name: str):
    """The module spec of ``name``, or None when it is no module (``find_spec`` raises below a plain module)."""
    try:
        return importlib.util.find_spec(name)
    except (ModuleNotFoundError, ValueError):
        return None


def _is_package(name: str) -> bool:
    spec = find_spec(name)
    return spec is not None and spec.submodule_search_locations is not None


def test_no_private_name_crosses_a_file() -> None:
    found = [line for path in SOURCES for line in private_reaches(path)]
    assert not found, "private names used across files:\n" + "\n".join(found)


def test_the_private_import_check_catches_one(tmp_path: Path) -> None:
    planted = PACKAGE / "spans" / "_planted_check.py"
    try:
        planted.write_text("from spanviz.spans.core import _planted\nfrom spanviz import model\nmodel._x\n")
        found = private_reaches(planted)
    finally:
        planted.unlink()
    assert len(found) == 2, found


@pytest.mark.parametrize("package", TECHNIQUES)
def test_technique_packages_share_one_template(package: str) -> None:
    files = {p.name for p in (PACKAGE / package).glob("*.py")}
    assert {"__init__.py", "core.py", "probe.py", "demos.py"} <= files, sorted(files)
    assert "probes.py" not in files and "view.py" not in files, sorted(files)


def test_cli_face_is_main() -> None:
    import spanviz.cli

    assert spanviz.cli.__all__ == ["main"]
    assert callable(spanviz.cli.main)


CODE_LINES_WARN = 300
"""A file's budget in *code* lines (docstrings, comments and blank lines are free: a file must never shorten its
explanations to fit): above it a warning asks whether the file holds more than one responsibility. No count fails
the suite: files are split by responsibility, not to meet a number."""


def code_lines(path: Path) -> int:
    """Lines of ``path`` that hold code: not blank, not only a comment, not inside a docstring."""
    source = path.read_text()
    docstring_lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(
                getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            docstring_lines.update(range(body[0].lineno, body[0].end_lineno + 1))
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):  # attribute docstrings after an assignment
            docstring_lines.update(range(node.lineno, node.end_lineno + 1))
    return sum(1 for i, line in enumerate(source.splitlines(), 1)
               if line.strip() and not line.strip().startswith("#") and i not in docstring_lines)


def test_code_lines_per_file_within_budget_and_fp8_core_within_300() -> None:
    sizes = {str(p.relative_to(REPO)): code_lines(p) for p in SOURCES}
    assert len(sizes) > 50 and sum(sizes.values()) > 10_000  # the package's files were read
    for name, n in sorted(sizes.items()):
        if n > CODE_LINES_WARN:
            warnings.warn(f"{name}: {n} code lines (budget {CODE_LINES_WARN}): one responsibility or several?",
                          stacklevel=1)
    assert sizes["spanviz/fp8/core.py"] <= 300


def test_code_lines_ignore_docstrings_and_comments(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text('"""Module.\n\nMore."""\n\n# a comment\nX = 1\n"""X\'s docstring."""\n\n\ndef f():\n'
                 '    """Doc."""\n    return X  # trailing comment counts as code\n')
    assert code_lines(f) == 3


def run_lint_imports(root: Path) -> subprocess.CompletedProcess:
    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True))")
    return subprocess.run([sys.executable, "-c", code], cwd=root, env={"PYTHONPATH": str(root), "PATH": ""},
                          capture_output=True, text=True, timeout=300)


def test_layer_contract_is_package_level_and_catches_a_planted_import(tmp_path: Path) -> None:
    text = (REPO / "pyproject.toml").read_text()
    assert re.search(r'containers\s*=\s*\["spanviz"\]', text) and re.search(r"exhaustive\s*=\s*true", text)
    root = tmp_path / "tree"
    shutil.copytree(PACKAGE, root / "spanviz", ignore=shutil.ignore_patterns("__pycache__", "bundles", "static"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    kept = run_lint_imports(root)
    assert kept.returncode == 0, kept.stdout[-3000:] + kept.stderr[-3000:]

    core = root / "spanviz" / "spans" / "core.py"
    core.write_text(core.read_text() + "\nimport spanviz.widgets  # planted: a technique reaching up\n")
    broken = run_lint_imports(root)
    assert broken.returncode != 0
    assert "spanviz.spans is not allowed to import spanviz.widgets" in broken.stdout

    core.write_text(core.read_text().replace("import spanviz.widgets", "import spanviz.bench"))
    (root / "spanviz" / "unplaced.py").write_text('"""A module nobody placed."""\n')
    unplaced = run_lint_imports(root)
    assert unplaced.returncode != 0 and "unplaced" in unplaced.stdout


# ----------------------------------------------------------------- no import circle inside a package
def imports_inside(package: str) -> dict[str, set[str]]:
    """``{module: modules of the same package it imports}`` for ``spanviz.<package>``, ``TYPE_CHECKING`` imports
    included (an annotation-only import still ties the two files together for a reader); the package's
    ``__init__`` is a module like the others."""
    paths = sorted((PACKAGE / package).rglob("*.py"))
    names = {module_name(p) for p in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                source = absolute(node, path)
                found |= {f"{source}.{a.name}" if f"{source}.{a.name}" in names else source for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        graph[module_name(path)] = {m for m in found if m in names and m != module_name(path)}
    return graph


def find_circle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` as ``[a, b, ..., a]``, or ``[]`` when there is none (depth-first search)."""
    state: dict[str, str] = {}  # "open": on the current path, "done": no circle through it

    def visit(node: str, path: list[str]) -> list[str]:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt):], node, nxt]
            if nxt not in state and (circle := visit(nxt, [*path, node])):
                return circle
        state[node] = "done"
        return []

    return next((c for n in sorted(graph) if n not in state and (c := visit(n, []))), [])


def test_the_circle_check_finds_a_planted_one() -> None:
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


@pytest.mark.parametrize("package", ["train", "cli", "widgets", "store", "experiments", "spans", "fp8",
                                     "local_global", "data", "plots", "site", "bench"])
def test_no_import_circle_inside_the_package(package: str) -> None:
    """Within each package imports run one way: in ``spanviz.train`` annotations go against a Protocol and the
    checkpoint module handles plain state (the loop, its callbacks, checkpoints and records no longer import each
    other round); in ``spanviz.cli`` the train flags are a leaf under the plans and the ``--config`` reader."""
    graph = imports_inside(package)
    assert len(graph) > 3 and any(graph.values())  # the check reads the package's imports
    assert find_circle(graph) == []


# ---------------------------------------------------------------- names the user reads must be on the faces
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
DOTTED = re.compile(r"\bspanviz(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
CODE_SPANS = re.compile(r"```(?:python|py)?\n(.*?)```|`([^`\n]+)`", re.S)


def exported(module: str, name: str) -> bool:
    """``module.name`` is what a reader may name: on a package face's ``__all__`` (or a submodule), or public in a
    module that defines it (a plain module, or a package without a face such as ``spanviz.bench``)."""
    mod = importlib.import_module(module)
    if _is_package(module) and hasattr(mod, "__all__"):  # a face: only what it exports, or a submodule
        return name in mod.__all__ or find_spec(f"{module}.{name}") is not None
    return not name.startswith("_") and hasattr(mod, name)


def split_dotted(dotted: str) -> tuple[str, str] | None:
    """``spanviz.a.b.X`` → (the longest importable module, the first attribute after it)."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:cut])
        if find_spec(module) is not None:
            return module, parts[cut]
    return None


def names_in_code(code: str) -> list[tuple[str, str]]:
    """(module, name) pairs a piece of Python names: imports from spanviz, and ``alias.X`` of imported packages."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    pairs, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("spanviz"):
            for alias in node.names:
                pairs.append((node.module, alias.name))
                if _is_package(f"{node.module}.{alias.name}"):
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("spanviz") and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            pairs.append((aliases[node.value.id], node.attr))
    return pairs


def user_facing_names() -> list[tuple[str, str, str]]:
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for match in DOTTED.finditer(text):
            split = split_dotted(match.group(0))
            if split:
                found.append((doc.name, *split))
        for block in CODE_SPANS.finditer(text):
            found += [(doc.name, *pair) for pair in names_in_code(block.group(1) or block.group(2))]
    for notebook in NOTEBOOKS:
        cells = nbformat.read(notebook, as_version=4).cells
        code = "\n".join(line for c in cells if c.cell_type == "code" for line in c.source.splitlines()
                         if not line.lstrip().startswith(("%", "!")))
        found += [(notebook.name, *pair) for pair in names_in_code(code)]
        for cell in cells:
            for match in DOTTED.finditer(cell.source):
                split = split_dotted(match.group(0))
                if split:
                    found.append((notebook.name, *split))
    return found


def test_readme_docs_and_notebooks_name_only_exported_names() -> None:
    found = user_facing_names()
    assert len(found) > 20  # the scan reads the notebooks and docs, not nothing
    missing = sorted({f"{where}: {module}.{name}" for where, module, name in found if not exported(module, name)})
    assert not missing, "named in README/docs/notebooks but not exported:\n" + "\n".join(missing)
