"""rlx/ holds the framework: benchmarks and studies sit in benchmarks/, one-off cross-checks in scripts/ (issue 59).

Those folders may import rlx; rlx must not import them (pip installs rlx alone, so such an import fails on
every install but a checkout). Every import counts, inside functions too, read from the AST.
"""

from __future__ import annotations

import ast

from tests.conftest import ROOT

OUTSIDE = ("benchmarks", "scripts")  # top-level folders beside rlx/, not installed


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the tree; relative imports stay inside rlx."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.append((node.lineno, node.module))
    return out


def test_rlx_imports_nothing_from_benchmarks_or_scripts():
    bad = []
    for path in sorted((ROOT / "rlx").rglob("*.py")):
        for line, name in _imported(ast.parse(path.read_text(), filename=str(path))):
            if name.split(".")[0] in OUTSIDE:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert bad == [], "rlx must not depend on benchmarks/ or scripts/:\n" + "\n".join(bad)


def test_no_benchmark_folder_in_rlx():
    assert not (ROOT / "rlx" / "bench").exists()
    assert not (ROOT / "rlx" / "benchmarks").exists()
    for folder in OUTSIDE:
        assert (ROOT / folder / "__init__.py").is_file(), f"`python -m {folder}.NAME` needs {folder}/__init__.py"


def test_the_packaging_leaves_benchmarks_and_scripts_out():
    import tomllib

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert find["include"] == ["rlx*"]
