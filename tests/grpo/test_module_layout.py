"""The grpo plugin's module layout: no file above 400 lines, no import cycle between its modules.

The import graph is read from the source by :mod:`tests.importgraph` (every import counts, those inside
functions and under ``TYPE_CHECKING`` too).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import seal_platform_plugins.grpo as grpo
from tests.importgraph import cycles, import_graph

PACKAGE = "seal_platform_plugins.grpo"
ROOT = Path(grpo.__file__).resolve().parent
MAX_LINES = 400


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
