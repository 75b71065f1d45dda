"""No import cycle in rlx/ (issue 26): the graph of every module's imports, read from the AST.

Every import counts, at module level or inside a function (a function-level import only hides a
cycle until the function runs), and `from pkg import name` is an edge to `pkg.name` when that is a
module, else to `pkg`. Importing `a.b.c` is an edge to `a.b.c` alone: the packages above it run
first, but a package importing its own submodules is how packages are built, not a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]


def module_files(root: Path, package: str) -> dict[str, Path]:
    """{dotted module name: file} for every .py under root/package (a package is its __init__.py)."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a `from X import ...` reads, relative forms (`from . import x`) resolved."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(path: Path, module: str, modules: set[str]) -> set[str]:
    """The modules in `modules` that the file imports anywhere in its body (functions included)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            src = _absolute(node, module, is_package)
            for alias in node.names:
                found.add(f"{src}.{alias.name}" if f"{src}.{alias.name}" in modules else src)
    return {m for m in found if m in modules and m != module}


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """{module: the package's modules it imports} for every module under root/package."""
    files = module_files(root, package)
    return {m: imports_of(p, m, set(files)) for m, p in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted; sorted by first name."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def describe(graph: dict[str, set[str]], comp: list[str]) -> str:
    """One cycle of the component as `a -> b -> a`, found by walking its edges from the first module."""
    inside = set(comp)
    path, seen = [comp[0]], {comp[0]: 0}
    while True:
        nxt = sorted(graph[path[-1]] & inside)[0]
        if nxt in seen:
            return " -> ".join(path[seen[nxt]:] + [nxt])
        seen[nxt] = len(path)
        path.append(nxt)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_a_function_level_cycle_is_found(tmp_path):
    # pkg.a imports pkg.b at module level; pkg.b imports pkg.a inside a function, by `from . import a`
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "from pkg.b import g\n",
                      "pkg/b.py": "def g():\n    from . import a\n    return a\n", "pkg/c.py": "import pkg.a\n"})
    graph = import_graph(tmp_path, "pkg")
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.a"}}
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
    assert describe(graph, ["pkg.a", "pkg.b"]) == "pkg.a -> pkg.b -> pkg.a"


def test_a_relative_cycle_through_a_subpackage_is_found(tmp_path):
    # pkg.sub.x -> pkg.y (`from .. import y`) -> pkg.sub.z (`from .sub.z import f`) -> pkg.sub.x (`from .x import *`)
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/sub/__init__.py": "",
                      "pkg/sub/x.py": "from .. import y\n", "pkg/y.py": "from .sub.z import f\n",
                      "pkg/sub/z.py": "from .x import *\ndef f():\n    pass\n"})
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.sub.x"] == {"pkg.y"} and graph["pkg.y"] == {"pkg.sub.z"} and graph["pkg.sub.z"] == {"pkg.sub.x"}
    assert cycles(graph) == [["pkg.sub.x", "pkg.sub.z", "pkg.y"]]


def test_an_acyclic_package_passes(tmp_path):
    # a package importing its submodules, and submodules importing each other one way, make no cycle
    _write(tmp_path, {"pkg/__init__.py": "from pkg.a import f\nfrom . import b\n",
                      "pkg/a.py": "import os\nfrom pkg import b\ndef f():\n    from pkg.c import h\n    return h\n",
                      "pkg/b.py": "from .c import h\n", "pkg/c.py": "import json\n"})
    graph = import_graph(tmp_path, "pkg")
    assert graph == {"pkg": {"pkg.a", "pkg.b"}, "pkg.a": {"pkg.b", "pkg.c"}, "pkg.b": {"pkg.c"}, "pkg.c": set()}
    assert cycles(graph) == []


def test_rlx_has_no_import_cycle():
    graph = import_graph(ROOT, "rlx")
    assert len(graph) > 100  # every module was read (rlx has well over 100)
    found = [describe(graph, comp) + (f"  (cycles among: {', '.join(comp)})" if len(comp) > 2 else "")
             for comp in cycles(graph)]
    assert not found, "import cycles in rlx/:\n" + "\n".join(found)

