"""No dead code: every top-level function, class and module constant, and every method, defined in production code
(``seal_platform/``, ``seal_platform_libs/``, ``plugins/``, the packages of ``examples/*/``) is referenced somewhere
else in the repository.

*Referenced* means the name is used elsewhere in code or configuration tracked by git: in a Python file (the file
itself included, tests and benchmarks too) as a loaded name, an attribute, an imported name, a keyword argument or
a word inside a string literal that is not a docstring (``getattr(x, "name")``, ``"module:function"``); or as a
word in any other tracked file that is not documentation (``pyproject.toml`` entry points, recipes, the Makefile,
templates, CI scripts). Documentation (``*.md``), comments and docstrings do not count: a definition that only the
docs mention is still never run. A name in ``__all__`` counts, being a declared export.

Referenced by a framework instead of by name, and so never reported: functions registered by a decorator
(``REGISTERING``: pluggy's ``@hookimpl``, click's commands, pydantic's validators), class attributes (pydantic and
dataclass fields), dunder names (``__all__``, ``__init__``), and what a test file defines (tests are not production
code). The check is by name, not by binding: a definition whose name is used for
something else elsewhere passes. That keeps it simple and free of false alarms; what it catches is the name no
one spells anywhere.

``ALLOWED`` lists the few definitions that stay unreferenced on purpose, as (file, name) with the reason; the second
test fails while an entry is referenced again or gone, so the list cannot go stale.
"""

from __future__ import annotations

import ast
import re
import subprocess
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = (
    "seal_platform/",
    "seal_platform_libs/",
    "plugins/",
    "examples/",
)  # under examples/, only packages (folders with __init__.py)
DOC_SUFFIXES = (".md", ".rst", ".txt")
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# (file, name): why it stays although nothing references it. Keep it short; every entry must still be unreferenced.
ALLOWED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Definition:
    file: str  # relative to the root, with "/"
    line: int
    name: str  # "Class.method" for a method

    @property
    def short(self) -> str:
        """The name as code spells it (a method's without its class)."""
        return self.name.rsplit(".", 1)[-1]

    def __str__(self) -> str:
        return f"{self.file}:{self.line} {self.name}"


def _docstring_ids(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings (first statement of a module, class or function)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def python_uses(source: str) -> Counter[str]:
    """How often each name is used in a Python source: loaded names, attributes, imported names, keyword
    arguments and the words of non-docstring string literals (definitions themselves and stores are not uses)."""
    tree = ast.parse(source)
    docstrings = _docstring_ids(tree)
    uses: Counter[str] = Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store):
            uses[node.id] += 1
        elif isinstance(node, ast.Attribute):
            uses[node.attr] += 1
        elif isinstance(node, ast.alias):
            uses[node.name.split(".")[-1]] += 1
            uses.update(node.name.split(".")[:-1])
        elif isinstance(node, ast.ImportFrom) and node.module:
            uses.update(node.module.split("."))
        elif isinstance(node, ast.keyword) and node.arg:
            uses[node.arg] += 1
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            uses.update(WORD.findall(node.value))
    return uses


# Decorators that register a function with a framework, which then calls it by another route: pluggy's hook
# implementations, click's commands and groups, pydantic's validators and serializers.
REGISTERING = ("hookimpl", "command", "group", "field_validator", "model_validator", "field_serializer",
               "model_serializer")


def _is_registered(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in REGISTERING:
            return True
    return False


def definitions(rel: str, source: str) -> list[Definition]:
    """The top-level functions, classes and constants of a module (also those under a top-level ``if`` or
    ``try``) and the methods of its classes, less registered functions (``REGISTERING``) and dunder names.
    Class attributes (pydantic and dataclass fields among them) are not definitions here."""
    found: list[Definition] = []

    def visit(body: list[ast.stmt], in_class: str = "") -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if not _is_registered(node):
                    found.append(Definition(rel, node.lineno, in_class + node.name))
            elif isinstance(node, ast.ClassDef):
                found.append(Definition(rel, node.lineno, in_class + node.name))
                visit(node.body, in_class + node.name + ".")
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and not in_class:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            found.append(Definition(rel, node.lineno, name.id))
            elif isinstance(node, ast.If):
                visit(node.body, in_class)
                visit(node.orelse, in_class)
            elif isinstance(node, ast.Try):
                visit(node.body, in_class)
                for handler in node.handlers:
                    visit(handler.body, in_class)
                visit(node.orelse, in_class)
                visit(node.finalbody, in_class)

    visit(ast.parse(source).body)
    return [d for d in found if not (d.short.startswith("__") and d.short.endswith("__"))]


def _is_production(rel: str, root: Path) -> bool:
    if rel.startswith(("seal_platform/", "plugins/")):
        return True
    if not rel.startswith("examples/"):
        return False
    parts = rel.split("/")  # examples/<example>/<package>/.../<file>.py: inside a package of the example
    return len(parts) >= 4 and (root / parts[0] / parts[1] / parts[2] / "__init__.py").is_file()


def unreferenced(root: Path, files: list[str]) -> list[Definition]:
    """The definitions of production files under ``root`` that no file in ``files`` uses by name."""
    uses: Counter[str] = Counter()
    defined: list[Definition] = []
    for rel in files:
        path = root / rel
        if rel.endswith(DOC_SUFFIXES) or not path.is_file():
            continue
        if rel.endswith(".py"):
            source = path.read_text(encoding="utf-8")
            uses.update(python_uses(source))
            if _is_production(rel, root) and not rel.split("/")[-1].startswith(("test_", "conftest")):
                defined.extend(definitions(rel, source))
        else:
            try:
                uses.update(WORD.findall(path.read_text(encoding="utf-8")))
            except UnicodeDecodeError:  # a binary file (an image, a database)
                continue
    return [d for d in defined if not uses[d.short]]


def _tracked_files(root: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True)
    return [f for f in out.stdout.split("\0") if f]


# --- the repository -------------------------------------------------------------------------------------------


def test_every_top_level_definition_is_referenced() -> None:
    found = [d for d in unreferenced(ROOT, _tracked_files(ROOT)) if (d.file, d.name) not in ALLOWED]
    assert not found, (
        "unreferenced definitions in production code (delete them, or list them in ALLOWED with the "
        "reason):\n" + "\n".join(map(str, found))
    )


def stale_entries(allowed: dict[tuple[str, str], str], found: list[Definition]) -> list[tuple[str, str]]:
    """The entries of ``allowed`` that are no longer unreferenced definitions (referenced now, or gone)."""
    return sorted(set(allowed) - {(d.file, d.name) for d in found})


def test_every_allowed_definition_is_still_defined_and_unreferenced() -> None:
    stale = stale_entries(ALLOWED, unreferenced(ROOT, _tracked_files(ROOT)))
    assert not stale, "these ALLOWED entries are referenced now or gone; delete them from the list: " + ", ".join(
        f"{file} {name}" for file, name in stale
    )


# --- the scanner, on a made-up tree ---------------------------------------------------------------------------


def test_the_scanner_reports_exactly_the_names_no_one_uses(tmp_path: Path) -> None:
    files = {
        "seal_platform/__init__.py": "",
        "seal_platform/mod.py": '''\
            """Mentions dead_in_docstring."""
            import pluggy
            hookimpl = pluggy.HookimplMarker("x")
            LIMIT = 3  # used below
            UNUSED_CONSTANT = 4  # dead_in_comment
            A, B = 1, 2
            def dead_in_docstring():
                """Only its own name."""
            def used_here():
                return LIMIT + A
            def by_getattr():
                pass
            def by_entry_point():
                pass
            def by_test():
                pass
            def by_keyword():
                pass
            @hookimpl
            def a_hook():
                pass
            class Dead:
                field: int = 0
            class Alive:
                def __init__(self):
                    pass
                def dead_method(self):
                    pass
                @property
                def used_property(self):
                    return self
                @classmethod
                def nested_user(cls):
                    return cls().used_property
                class Inner:
                    def dead_inner(self):
                        pass
            @cli.command("x")
            def a_command():
                pass
            if LIMIT:
                def under_if():
                    pass
            try:
                import json
                def under_try():
                    return json
            except ImportError:
                pass
            X = used_here(Alive.nested_user)
            print(getattr(X, "by_getattr"))
            dict(by_keyword=1)
            ''',
        "plugins/p/__init__.py": "",
        "plugins/p/plugin.py": "def _private_dead():\n    pass\n",
        "examples/e/pkg/__init__.py": "",
        "examples/e/pkg/core.py": "def example_dead():\n    pass\n",
        "examples/e/pkg/test_core.py": "def test_defined_in_a_test():\n    pass\n",
        "examples/e/make_tasks.py": "def script_function():\n    pass\n",  # not in a package: a script
        "tests/test_x.py": "from seal_platform.mod import by_test\n",
        "pyproject.toml": '[project.entry-points.x]\nx = "seal_platform.mod:by_entry_point"\n',
        "docs/guide.md": "under_if, under_try, Dead and example_dead appear in the docs: not a use\n",
    }
    for rel, source in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    found = {(d.file, d.name) for d in unreferenced(tmp_path, sorted(files))}
    assert found == {
        ("seal_platform/mod.py", "UNUSED_CONSTANT"),
        ("seal_platform/mod.py", "B"),
        ("seal_platform/mod.py", "dead_in_docstring"),
        ("seal_platform/mod.py", "Dead"),
        ("seal_platform/mod.py", "Alive.dead_method"),
        ("seal_platform/mod.py", "Alive.Inner"),
        ("seal_platform/mod.py", "Alive.Inner.dead_inner"),
        ("seal_platform/mod.py", "under_if"),
        ("seal_platform/mod.py", "under_try"),
        ("plugins/p/plugin.py", "_private_dead"),
        ("examples/e/pkg/core.py", "example_dead"),
    }


def test_an_allowed_entry_goes_stale_when_referenced_or_gone() -> None:
    found = [Definition("plugins/p/a.py", 3, "kept"), Definition("plugins/p/a.py", 9, "Cls.method")]
    allowed = {("plugins/p/a.py", "kept"): "", ("plugins/p/a.py", "used_now"): "", ("plugins/p/gone.py", "x"): ""}
    assert stale_entries(allowed, found) == [("plugins/p/a.py", "used_now"), ("plugins/p/gone.py", "x")]
