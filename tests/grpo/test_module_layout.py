"""The module layout of the grpo plugin and of the policy runtime library (``seal_platform_libs.policy``):
no file above 400 lines, no import cycle between the modules of either.

The import graph is read from the source by :mod:`tests.importgraph` (every import counts, those inside
functions and under ``TYPE_CHECKING`` too).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import seal_platform_libs.policy as runtime
import seal_platform_plugins.grpo as grpo
from tests.importgraph import cycles, import_graph

PACKAGE = "seal_platform_plugins.grpo"
ROOT = Path(grpo.__file__).resolve().parent
LIBRARY = "seal_platform_libs.policy"
LIBRARY_ROOT = Path(runtime.__file__).resolve().parent
LAYOUTS = [(PACKAGE, ROOT), (LIBRARY, LIBRARY_ROOT)]
MAX_LINES = 400


# --- the rules, on the grpo plugin ------------------------------------------------------------------------


@pytest.mark.parametrize("package,root", LAYOUTS, ids=[name for name, _ in LAYOUTS])
def test_no_file_is_above_400_lines(package: str, root: Path):
    too_long = {
        str(path.relative_to(root)): n
        for path in root.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not too_long, f"{package} files above {MAX_LINES} lines (split them by job): {too_long}"


@pytest.mark.parametrize("package,root,must", [(PACKAGE, ROOT, "trainer"), (LIBRARY, LIBRARY_ROOT, "engines")],
                         ids=[PACKAGE, LIBRARY])
def test_no_import_cycle(package: str, root: Path, must: str):
    graph = import_graph(root, package)
    assert f"{package}.{must}" in graph
    found = [" -> ".join(c) for c in cycles(graph)]
    assert not found, f"import cycles in {package}:\n" + "\n".join(found)


def test_grpo_graph_sees_the_imports_it_must():
    graph = import_graph(ROOT, PACKAGE)
    # A module-level relative import, one inside a function, one from a submodule to its sibling.
    assert f"{PACKAGE}.settings" in graph[f"{PACKAGE}.plugin"]
    assert f"{PACKAGE}.run" in graph[f"{PACKAGE}.plugin"]  # imported inside start_run
    library = import_graph(LIBRARY_ROOT, LIBRARY)
    assert f"{LIBRARY}.engines.base" in library[f"{LIBRARY}.engines.hf"]


def test_plugin_modules_and_apatch_load_without_torch():
    # The plugin module imports A-Patch, which uses the objective's advantage, and the runtime's engine
    # factories and settings (as the policy_engines plugin does): none of them may load torch.
    code = (
        "import sys; import seal_platform_plugins.grpo.plugin, seal_platform_plugins.grpo.apatch, "
        "seal_platform_plugins.grpo.objective, seal_platform_plugins.policy_engines.plugin; "
        "print(','.join(m for m in ('torch', 'transformers', 'vllm') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
