"""No import cycle in rlx/ (issue 26) and its packages stack (issue 59): the graph of every module's
imports, read from the AST.

Every import counts, at module level or inside a function (a function-level import only hides a
cycle until the function runs), and `from pkg import name` is an edge to `pkg.name` when that is a
module, else to `pkg`. Importing `a.b.c` is an edge to `a.b.c` alone: the packages above it run
first, but a package importing its own submodules is how packages are built, not a cycle.

Packages stack in LAYERS' order: a package (or top-level module: rlx/train.py is `train`) imports only
packages before it, at module level or inside a function; a function-level import is for a heavy optional
dependency, never to hide an upward edge. A failure names the file and line of each import that runs up.
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


# bottom to top (docs/README.md, "Layers"): run/ is plumbing; tasks own answers and their readings; the
# SFT stage is inside models; eval holds the commands above the config they compose
LAYERS = ("run", "tasks", "quant", "models", "noise", "algo", "rollout", "envs", "extrapolation", "scaling",
          "config", "eval", "sweeps", "report", "train", "bench")
# no edge may run up (rlx/sweeps/cli.py runs `python -m rlx.report` as the next command, not as an import)
KNOWN_UPWARD: set[tuple[str, str]] = set()


def package_imports(root: Path, package: str) -> list[tuple[str, int, str, str]]:
    """(file, line, importing package, imported module) for every import of another of `package`'s packages,
    module level and inside functions; `from pkg import name` reads `pkg.name`, so `from rlx import models` is
    an import of the package rlx.models."""
    out = []
    for module, path in module_files(root, package).items():
        parts = module.split(".")
        if len(parts) < 2:  # the package's own __init__ sits under every layer
            continue
        rel, is_package = str(path.relative_to(root)), path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                src = _absolute(node, module, is_package)
                names = [f"{src}.{alias.name}" for alias in node.names] if src == package else [src]
            else:
                continue
            out += [(rel, node.lineno, parts[1], name) for name in names
                    if name.split(".")[0] == package and len(name.split(".")) > 1 and name.split(".")[1] != parts[1]]
    return sorted(out)


def upward_imports(root: Path, package: str, layers: tuple[str, ...], known=frozenset()) -> list[str]:
    """'file:line: a imports pkg.b.x, above it (a is layer i, b is layer j)' for every import that runs up
    (or into a package missing from `layers`), `known` (importer, imported) pairs aside."""
    floor = {name: i for i, name in enumerate(layers)}
    bad = []
    for rel, line, src, name in package_imports(root, package):
        dst = name.split(".")[1]
        if src not in floor or dst not in floor:
            missing = src if src not in floor else dst
            bad.append(f"{rel}:{line}: {package}.{missing} has no place in the layer order (add it to LAYERS)")
        elif floor[dst] > floor[src] and (src, dst) not in known:
            bad.append(f"{rel}:{line}: {src} imports {name}, above it ({src} is layer {floor[src]}, "
                       f"{dst} is layer {floor[dst]})")
    return bad


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



def test_an_upward_import_inside_a_function_is_named_by_file_and_line(tmp_path):
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/low/__init__.py": "", "pkg/high/__init__.py": "from pkg.low import f\n",
                      "pkg/low/a.py": "import os\n\ndef f():\n    from pkg.high import g\n    return g\n",
                      "pkg/low/b.py": "from .. import high\n", "pkg/top.py": "import pkg.high.x\nfrom pkg import low\n"})
    layers = ("low", "high", "top")
    assert upward_imports(tmp_path, "pkg", layers) == [
        "pkg/low/a.py:4: low imports pkg.high, above it (low is layer 0, high is layer 1)",
        "pkg/low/b.py:1: low imports pkg.high, above it (low is layer 0, high is layer 1)"]
    assert upward_imports(tmp_path, "pkg", layers, known={("low", "high")}) == []
    assert upward_imports(tmp_path, "pkg", ("low", "top")) == [  # a package with no place is named too
        "pkg/high/__init__.py:1: pkg.high has no place in the layer order (add it to LAYERS)",
        "pkg/low/a.py:4: pkg.high has no place in the layer order (add it to LAYERS)",
        "pkg/low/b.py:1: pkg.high has no place in the layer order (add it to LAYERS)",
        "pkg/top.py:1: pkg.high has no place in the layer order (add it to LAYERS)"]


def test_rlx_packages_stack():
    assert len(package_imports(ROOT, "rlx")) > 100  # every package's imports were read
    bad = upward_imports(ROOT, "rlx", LAYERS, KNOWN_UPWARD)
    assert not bad, "imports from a lower package up into a higher one (LAYERS, bottom to top: " + \
        " < ".join(LAYERS) + "):\n" + "\n".join(bad)
