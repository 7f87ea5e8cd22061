"""The grpo plugin's module layout: no file above 400 lines, no import cycle between its modules.

The import graph is read from the source with :mod:`ast` (nothing is imported): every ``import`` and
``from ... import`` anywhere in a module counts, including those inside functions and under
``TYPE_CHECKING``, relative or absolute (``seal_platform_plugins.grpo...``). ``from pkg import name`` is an
edge to ``pkg.name`` when that is a module of the package, else to ``pkg``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import seal_platform_plugins.grpo as grpo

PACKAGE = "seal_platform_plugins.grpo"
ROOT = Path(grpo.__file__).resolve().parent
MAX_LINES = 400


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file under ``root`` (the directory of ``package``)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([package, *parts])] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is one of ``modules`` (None: not ours)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the package that ``module`` imports (anywhere in its file)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                       for alias in node.names]
        else:
            continue
        for target in targets:
            resolved = _resolve(target, modules)
            if resolved is not None and resolved != module:
                found.add(resolved)
    return found


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    modules = module_files(root, package)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) for each strongly connected component with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm (the graphs are small: recursion is fine)
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
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for component in components:
        if len(component) < 2:
            continue
        start = min(component)
        # Shortest path from start back to start inside the component (breadth first).
        previous: dict[str, str] = {}
        frontier = [start]
        while frontier and start not in previous:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v] & component):
                    if w not in previous:
                        previous[w] = v
                        nxt.append(w)
            frontier = nxt
        path = [start]
        v = previous[start]
        while v != start:
            path.append(v)
            v = previous[v]
        path.append(start)
        out.append(path[::-1])
    return out


# --- the rules, on the grpo plugin ------------------------------------------------------------------------


def test_no_grpo_file_is_above_400_lines():
    too_long = {
        str(path.relative_to(ROOT)): n
        for path in ROOT.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not too_long, f"plugins/grpo files above {MAX_LINES} lines (split them by job): {too_long}"


def test_grpo_has_no_import_cycle():
    graph = import_graph(ROOT, PACKAGE)
    assert f"{PACKAGE}.trainer" in graph and f"{PACKAGE}.engines" in graph
    found = [" -> ".join(c) for c in cycles(graph)]
    assert not found, "import cycles in plugins/grpo:\n" + "\n".join(found)


def test_grpo_graph_sees_the_imports_it_must():
    graph = import_graph(ROOT, PACKAGE)
    # A module-level relative import, one inside a function, one from a submodule to its sibling.
    assert f"{PACKAGE}.settings" in graph[f"{PACKAGE}.plugin"]
    assert f"{PACKAGE}.run" in graph[f"{PACKAGE}.plugin"]  # imported inside start_run
    assert f"{PACKAGE}.engines.base" in graph[f"{PACKAGE}.engines.hf"]


def test_plugin_module_and_apatch_load_without_torch():
    # The plugin module imports A-Patch, which uses the objective's advantage: none of them may load torch.
    code = (
        "import sys; import seal_platform_plugins.grpo.plugin, seal_platform_plugins.grpo.apatch, "
        "seal_platform_plugins.grpo.objective; "
        "print(','.join(m for m in ('torch', 'transformers', 'vllm') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


# --- the checker itself, on a package made to break the rules ---------------------------------------------


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_checker_finds_cycles_through_functions_type_checking_and_packages(tmp_path: Path):
    _write(tmp_path, {
        "__init__.py": "",
        "a.py": "def f():\n    from .b import g\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n",
        "sub/__init__.py": "def make():\n    from .impl import Impl\n",
        "sub/impl.py": "from . import Settings\n",
        "sub/other.py": "from .. import a\nfrom ..sub import impl\n",
        "c.py": "from pkg.sub import other\nimport os\n",
    })
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.a"] == {"pkg.b"}
    assert graph["pkg.b"] == {"pkg.a"}
    assert graph["pkg.sub.other"] == {"pkg.a", "pkg.sub.impl"}
    assert graph["pkg.c"] == {"pkg.sub.other"}
    assert sorted(cycles(graph)) == [["pkg.a", "pkg.b", "pkg.a"], ["pkg.sub", "pkg.sub.impl", "pkg.sub"]]


def test_checker_passes_an_acyclic_package(tmp_path: Path):
    _write(tmp_path, {
        "__init__.py": "",
        "a.py": "from . import b\n",
        "b.py": "from .c import x\n",
        "c.py": "x = 1\n",
    })
    graph = import_graph(tmp_path, "pkg")
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.c"}, "pkg.c": set()}
    assert cycles(graph) == []
