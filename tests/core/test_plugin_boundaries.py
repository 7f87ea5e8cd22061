"""Import boundaries, three layers: the core (``seal_platform``), the library floor (``seal_platform_libs``) and the
plugins (``plugins/``, ``examples/``).

* the core imports no library and no plugin;
* a library imports the core, other libraries (``seal_platform_libs.*``) and third-party packages, never a
  plugin or an example;
* a plugin imports the core, the libraries, its own modules and third-party packages, never another plugin.
* of the core, a plugin never imports the command line (``seal_platform.cli``, wiring): what a plugin's command
  needs is in ``seal_platform.commands`` (an example's tests may drive the command line).

Every ``.py`` file under ``plugins/`` and ``examples/`` is read with :mod:`ast` (nothing is imported), and every
import in it counts wherever it stands: at module level, inside functions and classes, under ``if
TYPE_CHECKING:``, and ``importlib.import_module("...")`` / ``__import__("...")`` with a literal name.
A plugin is a sub-package of ``plugins/`` (``seal_platform_plugins.<name>``) or a folder of ``examples/`` (whose
top-level packages and modules are its own).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "seal_platform_plugins"  # plugins/ is installed under this name
LIBRARIES = "seal_platform_libs"  # the library floor between the core and the plugins
SKIPPED_DIRS = {"build", "dist", "__pycache__", "node_modules"}

# The cross-plugin imports still allowed, as (file, imported module) pairs, and no others (issue 24 item 2 moved
# the last ones: grpo's Ray engine replicas and trainer groups live in grpo and reach the Ray cluster through
# the core's typed contract, ``ctx.cluster``). Add none: the test below fails while a listed pair no longer
# occurs, so this list cannot go stale.
PENDING_EDGES: frozenset[tuple[str, str]] = frozenset()

# Core modules no plugin imports, with what to import instead.
FORBIDDEN_CORE = {"seal_platform.cli": "the command line is wiring; use seal_platform.commands"}


@dataclass(frozen=True)
class Edge:
    """One forbidden import: where it stands and what it imports."""

    file: str  # relative to the scanned root, with "/"
    line: int
    target: str  # the imported module, absolute
    why: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} imports {self.target} ({self.why})"


@dataclass(frozen=True)
class _Import:
    line: int
    level: int  # 0: absolute
    module: str  # as written ("" for `from . import x`)
    names: tuple[str, ...]  # for `from m import a, b`; () for `import m`


def _python_files(folder: Path) -> list[Path]:
    out = []
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(folder).parts[:-1]
        if any(p in SKIPPED_DIRS or p.startswith(".") or p.endswith(".egg-info") for p in parts):
            continue
        out.append(path)
    return out


def _imports(path: Path) -> list[_Import]:
    """Every import statement in the file, at any depth, and literal-named dynamic imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[_Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(_Import(node.lineno, 0, alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names = tuple(alias.name for alias in node.names if alias.name != "*")
            found.append(_Import(node.lineno, node.level, node.module or "", names))
        elif isinstance(node, ast.Call) and node.args and _is_dynamic_import(node.func):
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.append(_Import(node.lineno, 0, first.value, ()))
    return found


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in ("__import__", "import_module")
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


def _module_parts(path: Path, root_dir: Path, prefix: tuple[str, ...]) -> tuple[str, ...]:
    """The dotted name of a file (``prefix`` + its path under ``root_dir``); a package's ``__init__`` is the
    package itself."""
    parts = path.relative_to(root_dir).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return prefix + parts


def _targets(imp: _Import, package: tuple[str, ...], exists) -> tuple[list[str], int]:
    """The absolute modules an import names, and how many components of ``package`` a relative import keeps
    (``len(package)`` for an absolute one; negative when it climbs above the top).

    ``from m import a`` names ``m.a`` when that is a module (``exists``; always at the top and in the plugins'
    namespace, which holds nothing but plugins), else ``m``.
    """
    keep = len(package) - (imp.level - 1) if imp.level else len(package)
    if keep < 0:
        return ["." * imp.level + imp.module], keep
    if imp.level:
        base = package[:keep] + tuple(p for p in imp.module.split(".") if p)
    else:
        base = tuple(imp.module.split("."))
    if not imp.names:
        return [".".join(base)], keep
    out: list[str] = []
    for name in imp.names:
        candidate = ".".join(base + (name,))
        target = candidate if base in ((), (NAMESPACE,)) or exists(candidate) else ".".join(base)
        if target not in out:
            out.append(target)
    return out, keep


def _forbidden_core(imp: _Import) -> list[tuple[str, str]]:
    """The modules of :data:`FORBIDDEN_CORE` an absolute import names (``from seal_platform import cli`` too),
    each with why it is forbidden."""
    if imp.level:
        return []
    named = [imp.module, *(f"{imp.module}.{name}" for name in imp.names)]
    return [(module, why) for module in named for core, why in FORBIDDEN_CORE.items()
            if module == core or module.startswith(core + ".")][:1]


def _owner_of(module: str, owners: dict[str, str]) -> str | None:
    """The plugin that owns a module: for ``seal_platform_plugins.<name>...`` that plugin, for an example's
    top-level package or module that example; None for anything else (the core, third-party libraries)."""
    parts = module.split(".")
    if parts[0] == NAMESPACE:
        return f"{NAMESPACE}.{parts[1]}" if len(parts) > 1 else None
    return owners.get(parts[0])


def plugin_edges(root: Path) -> list[Edge]:
    """The imports under ``root/plugins`` and ``root/examples`` of a plugin other than the file's own, and
    relative imports that climb out of the file's plugin."""
    plugins_dir, examples_dir = root / "plugins", root / "examples"
    owners: dict[str, str] = {}  # an example's top-level package or module -> the example
    if examples_dir.is_dir():
        for example in sorted(p for p in examples_dir.iterdir() if p.is_dir()):
            for child in example.iterdir():
                if child.is_dir() and (child / "__init__.py").is_file() and child.name not in SKIPPED_DIRS:
                    owners[child.name] = f"examples/{example.name}"
                elif child.suffix == ".py":
                    owners[child.stem] = f"examples/{example.name}"

    def exists(module: str) -> bool:
        parts = module.split(".")
        if parts[0] == NAMESPACE:
            folder = plugins_dir.joinpath(*parts[1:])
        elif parts[0] in owners:
            folder = root.joinpath(owners[parts[0]], *parts)
        else:
            return False
        return folder.with_suffix(".py").is_file() or (folder / "__init__.py").is_file()

    files: list[tuple[Path, str | None, tuple[str, ...], int]] = []  # file, owner, its module, own depth
    if plugins_dir.is_dir():
        for path in _python_files(plugins_dir):
            module = _module_parts(path, plugins_dir, (NAMESPACE,))
            owner = f"{NAMESPACE}.{module[1]}" if len(module) > 1 else None
            files.append((path, owner, module, 2))
    if examples_dir.is_dir():
        for example in sorted(p for p in examples_dir.iterdir() if p.is_dir()):
            for path in _python_files(example):
                files.append((path, f"examples/{example.name}", _module_parts(path, example, ()), 1))

    edges: list[Edge] = []
    for path, owner, module, own_depth in files:
        rel = path.relative_to(root).as_posix()
        package = module if path.name == "__init__.py" else module[:-1]
        a_test = "tests" in path.relative_to(root).parts[:-1]
        for imp in _imports(path):
            if not a_test:
                edges.extend(Edge(rel, imp.line, module, why) for module, why in _forbidden_core(imp))
            targets, keep = _targets(imp, package, exists)
            climbs = imp.level > 0 and keep < own_depth
            for target in targets:
                other = _owner_of(target, owners)
                if climbs:
                    edges.append(Edge(rel, imp.line, target, "a relative import that escapes the plugin's folder"))
                elif other is not None and other != owner:
                    edges.append(Edge(rel, imp.line, target, f"another plugin's package: {other}"))
    return edges


def core_edges(root: Path) -> list[Edge]:
    """The imports of a plugin (``seal_platform_plugins``) or a library (``seal_platform_libs``) anywhere under
    ``root/seal_platform``, and relative imports that climb out of it."""
    return _layer_edges(root, "seal_platform", "the core", {NAMESPACE: "a plugin", LIBRARIES: "a library"})


def library_edges(root: Path) -> list[Edge]:
    """The imports of a plugin (``seal_platform_plugins``, or an example's package) anywhere under
    ``root/seal_platform_libs``, and relative imports that climb out of it. Libraries may import each other."""
    examples = root / "examples"
    forbidden = {NAMESPACE: "a plugin"}
    if examples.is_dir():
        for child in examples.glob("*/*"):
            if (child.is_dir() and (child / "__init__.py").is_file()) or child.suffix == ".py":
                forbidden.setdefault(child.stem, f"an example plugin (examples/{child.parent.name})")
    return _layer_edges(root, LIBRARIES, "a library", forbidden)


def _layer_edges(root: Path, top: str, what: str, forbidden: dict[str, str]) -> list[Edge]:
    """The imports under ``root/top`` of a top-level package in ``forbidden`` (name -> what it is), and
    relative imports that climb out of ``top``."""
    folder = root / top
    edges: list[Edge] = []
    for path in _python_files(folder) if folder.is_dir() else []:
        module = _module_parts(path, folder, (top,))
        package = module if path.name == "__init__.py" else module[:-1]
        rel = path.relative_to(root).as_posix()
        for imp in _imports(path):
            targets, keep = _targets(imp, package, lambda _m: False)
            for target in targets:
                if imp.level > 0 and keep < 1:
                    edges.append(Edge(rel, imp.line, target, f"a relative import that escapes {top}"))
                elif target.split(".")[0] in forbidden:
                    edges.append(Edge(rel, imp.line, target, f"{what} imports {forbidden[target.split('.')[0]]}"))
    return edges


# --- the repository -------------------------------------------------------------------------------------------


def test_no_plugin_or_example_imports_another_plugin() -> None:
    unexpected = [e for e in plugin_edges(ROOT) if (e.file, e.target) not in PENDING_EDGES]
    assert not unexpected, (
        "cross-plugin imports (use seal_platform / seal_platform_libs.toolenv instead):\n"
        + "\n".join(map(str, unexpected))
    )


def test_every_pending_cross_plugin_import_still_occurs() -> None:
    seen = {(e.file, e.target) for e in plugin_edges(ROOT)}
    stale = sorted(PENDING_EDGES - seen)
    assert not stale, "these PENDING_EDGES no longer occur; delete them from the list: " + ", ".join(
        f"{file} -> {target}" for file, target in stale
    )


def test_the_core_imports_no_plugin_and_no_library() -> None:
    edges = core_edges(ROOT)
    assert not edges, "the core (seal_platform/) imports plugins or libraries:\n" + "\n".join(map(str, edges))


def test_the_libraries_import_no_plugin() -> None:
    assert (ROOT / LIBRARIES / "policy" / "engines").is_dir()
    edges = library_edges(ROOT)
    assert not edges, "the libraries (seal_platform_libs/) import plugins:\n" + "\n".join(map(str, edges))


def test_the_tool_environment_library_imports_nothing_heavy() -> None:
    modules = sorted(p.stem for p in (ROOT / "seal_platform_libs" / "toolenv").glob("*.py") if p.stem != "__init__")
    assert {"calls", "evolution", "formats", "interface"} <= set(modules)
    code = (
        "import sys\n"
        + "".join(f"import seal_platform_libs.toolenv.{m}\n" for m in modules)
        + "heavy = ('torch', 'vllm', 'ray', 'transformers', 'jsonschema', 'mcp', 'bfcl_eval', "
        "'seal_platform_plugins')\n"
        "print(','.join(sorted(m for m in heavy if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


# --- the scanner, on a made-up tree ---------------------------------------------------------------------------


def _write(root: Path, files: dict[str, str]) -> None:
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))


def test_the_scanner_finds_every_kind_of_cross_plugin_import(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "plugins/__init__.py": "",
            "plugins/a/__init__.py": "from . import x\n",
            "plugins/a/x.py": """\
                from typing import TYPE_CHECKING
                import importlib
                from seal_platform.types import Task
                from seal_platform_plugins.a import y
                from . import y as y2
                from seal_platform_plugins.b import m
                if TYPE_CHECKING:
                    from seal_platform_plugins.b.m import Thing
                def f():
                    import seal_platform_plugins.b as pb
                    from seal_platform_plugins import b
                    return importlib.import_module("seal_platform_plugins.b.m")
                from ..b import m as m2
                from .. import c
                """,
            "plugins/a/y.py": "",
            "plugins/b/__init__.py": "",
            "plugins/b/m.py": "from ...elsewhere import z\n",
            "examples/e1/pkg1/__init__.py": "",
            "examples/e1/pkg1/mod.py": """\
                from pkg1 import other
                from .other import thing
                def g():
                    from pkg2.tool import h
                    import seal_platform_plugins.a.x
                from .. import up
                """,
            "examples/e1/pkg1/other.py": "",
            "examples/e1/build/lib/pkg1/mod.py": "import pkg2\n",
            "examples/e2/pkg2/__init__.py": "",
            "examples/e2/pkg2/tool.py": "",
            "examples/e2/tests/test_tool.py": "from pkg2.tool import h\nimport pkg1\n",
        },
    )
    found = {(e.file, e.line, e.target, e.why.split(":")[0]) for e in plugin_edges(tmp_path)}
    other, escape = "another plugin's package", "a relative import that escapes the plugin's folder"
    assert found == {
        ("plugins/a/x.py", 6, "seal_platform_plugins.b.m", other),
        ("plugins/a/x.py", 8, "seal_platform_plugins.b.m", other),
        ("plugins/a/x.py", 10, "seal_platform_plugins.b", other),
        ("plugins/a/x.py", 11, "seal_platform_plugins.b", other),
        ("plugins/a/x.py", 12, "seal_platform_plugins.b.m", other),
        ("plugins/a/x.py", 13, "seal_platform_plugins.b.m", escape),
        ("plugins/a/x.py", 14, "seal_platform_plugins.c", escape),
        ("plugins/b/m.py", 1, "elsewhere", escape),
        ("examples/e1/pkg1/mod.py", 4, "pkg2.tool", other),
        ("examples/e1/pkg1/mod.py", 5, "seal_platform_plugins.a.x", other),
        ("examples/e1/pkg1/mod.py", 6, "up", escape),
        ("examples/e2/tests/test_tool.py", 2, "pkg1", other),
    }


def test_the_scanner_finds_a_plugin_import_of_the_command_line(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "plugins/__init__.py": "",
            "plugins/a/__init__.py": "",
            "plugins/a/x.py": """\
                from seal_platform.commands import console
                from seal_platform.cli import open_store
                def f():
                    from seal_platform import cli, config
                    import seal_platform.cli
                    return importlib.import_module("seal_platform.cli")
                """,
            "examples/e1/pkg1/__init__.py": "from seal_platform import cli\n",
            "examples/e1/tests/test_cli.py": "from seal_platform.cli import cli\n",
        },
    )
    found = {(e.file, e.line, e.target) for e in plugin_edges(tmp_path)}
    assert found == {
        ("plugins/a/x.py", 2, "seal_platform.cli"),
        ("plugins/a/x.py", 4, "seal_platform.cli"),
        ("plugins/a/x.py", 5, "seal_platform.cli"),
        ("plugins/a/x.py", 6, "seal_platform.cli"),
        ("examples/e1/pkg1/__init__.py", 1, "seal_platform.cli"),
    }


def test_the_scanner_finds_a_plugin_import_in_the_core(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "seal_platform/__init__.py": "from . import types\n",
            "seal_platform/types.py": "import json\n",
            "seal_platform/sub/__init__.py": "from .. import types\n",
            "seal_platform/sub/deep.py": """\
                def late():
                    from seal_platform_plugins.bfcl import data
                    return data
                from ... import seal_platform_plugins
                """,
        },
    )
    found = {(e.file, e.line, e.target) for e in core_edges(tmp_path)}
    assert found == {
        ("seal_platform/sub/deep.py", 2, "seal_platform_plugins.bfcl"),
        ("seal_platform/sub/deep.py", 4, "seal_platform_plugins"),
    }


def test_the_scanner_finds_a_library_import_in_the_core_and_a_plugin_import_in_a_library(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "seal_platform/__init__.py": "",
            "seal_platform/engine.py": "def f():\n    import seal_platform_libs.policy.loading\n",
            "seal_platform_libs/__init__.py": "",
            "seal_platform_libs/policy/__init__.py": "from . import loading\n",
            "seal_platform_libs/policy/loading.py": """\
                from seal_platform.types import Task
                from seal_platform_libs.toolenv import calls
                from seal_platform_plugins.grpo import settings
                def late():
                    from seal_kvstore import oracle
                    return oracle
                from ... import elsewhere
                """,
            "examples/seal-kvstore/seal_kvstore/__init__.py": "",
        },
    )
    assert {(e.file, e.line, e.target) for e in core_edges(tmp_path)} == {
        ("seal_platform/engine.py", 2, "seal_platform_libs.policy.loading"),
    }
    assert {(e.file, e.line, e.target) for e in library_edges(tmp_path)} == {
        ("seal_platform_libs/policy/loading.py", 3, "seal_platform_plugins.grpo"),
        ("seal_platform_libs/policy/loading.py", 5, "seal_kvstore"),
        ("seal_platform_libs/policy/loading.py", 7, "elsewhere"),
    }
