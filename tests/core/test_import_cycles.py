"""No import cycles: in the core (``seal_platform``), in each library (``seal_platform_libs.<name>``), in each plugin
under ``plugins/`` and in each example plugin under ``examples/``. The graph is read from the source
(:mod:`tests.importgraph`): imports inside functions and under ``TYPE_CHECKING`` count, so a cycle cannot hide behind a
lazy or type-only import (move what both sides need to a module of its own, e.g. ``seal_platform/types.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import seal_platform
from tests.importgraph import cycles, import_graph

REPO = Path(seal_platform.__file__).resolve().parent.parent


def _packages() -> list[tuple[str, Path]]:
    out = [("seal_platform", REPO / "seal_platform")]
    out += [(f"seal_platform_libs.{d.name}", d) for d in sorted((REPO / "seal_platform_libs").iterdir())
            if (d / "__init__.py").is_file()]
    out += [(f"seal_platform_plugins.{d.name}", d) for d in sorted((REPO / "plugins").iterdir())
            if (d / "__init__.py").is_file()]
    out += [(d.name, d) for d in sorted((REPO / "examples").glob("*/*")) if (d / "__init__.py").is_file()]
    return out


PACKAGES = _packages()


def test_every_plugin_and_example_is_checked():
    names = {name for name, _ in PACKAGES}
    assert {"seal_platform", "seal_platform_libs.policy", "seal_platform_plugins.bfcl", "seal_platform_plugins.grpo",
            "seal_platform_plugins.diagnosis_llm", "seal_arithmetic", "seal_tensorboard"} <= names


@pytest.mark.parametrize("package,root", PACKAGES, ids=[name for name, _ in PACKAGES])
def test_no_import_cycle(package: str, root: Path):
    graph = import_graph(root, package)
    assert len(graph) > 1 or package != "seal_platform"
    found = [" -> ".join(c) for c in cycles(graph)]
    assert not found, f"import cycles in {package} (break each: move what both sides need to its own module):\n" + \
        "\n".join(found)


def test_the_core_graph_sees_lazy_and_type_checking_imports():
    graph = import_graph(REPO / "seal_platform", "seal_platform")
    assert "seal_platform.config" in graph["seal_platform.hookspecs"]  # under TYPE_CHECKING
    assert "seal_platform.runlog" in graph["seal_platform.present.run_display"]  # inside a function
    assert "seal_platform.store.safety" in graph["seal_platform.store.readonly"]


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
