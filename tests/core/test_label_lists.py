"""The label lists have one definition, :mod:`seal_platform.labels`; the core and the plugins derive theirs from it.

A copy of a list cannot drift if there is none: the source of the core and of the shipped plugins holds no
literal list of the reference labels nor of the excluded labels other than the one in ``seal_platform/labels.py``,
and the defaults that use them are the core's values.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from seal_platform.labels import EXCLUDED_LABELS, REFERENCE_LABELS, UNREACHED_LABEL

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "seal_platform" / "labels.py"


def _string_literals() -> list[tuple[str, int, set[str]]]:
    """(file, line, strings) of every list, tuple and set literal of the core and the shipped plugins."""
    out = []
    for path in sorted([*(ROOT / "seal_platform").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
                strings = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                if strings:
                    out.append((str(path.relative_to(ROOT)), node.lineno, strings))
    return out


def test_no_module_but_seal_platform_labels_spells_out_a_label_list():
    home = str(HOME.relative_to(ROOT))
    # A copy of the excluded labels names both verifier-side labels; a copy of the reference labels names
    # (nearly) all of them. The Table 5 mappings name at most four reference labels and no excluded one.
    lists = [(f, line) for f, line, strings in _string_literals() if
             {"gt_error", "checker_error"} <= strings or len(strings & set(REFERENCE_LABELS)) >= len(REFERENCE_LABELS) - 2]
    copies = [(f, line) for f, line in lists if f != home]
    assert copies == [], f"label lists spelled out again (derive them from seal_platform.labels): {copies}"
    assert len(lists) == 2  # the rule finds the two definitions in seal_platform/labels.py


def test_the_excluded_labels_are_the_reference_labels_docs_labels_md_marks_excluded():
    doc = (ROOT / "docs" / "labels.md").read_text()
    table = doc.split("## Reference labels", 1)[1].split("## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_]+)` \|.*\| ([^|]+) \|$", table, flags=re.M)
    assert [label for label, weight in rows] == list(REFERENCE_LABELS)
    assert tuple(label for label, weight in rows if weight.strip() == "excluded") == EXCLUDED_LABELS
    assert UNREACHED_LABEL in EXCLUDED_LABELS and REFERENCE_LABELS[-1] == UNREACHED_LABEL


def test_the_core_evolution_excludes_the_core_excluded_labels_by_default():
    from seal_platform.toolenv.evolution import EvolutionSettings

    assert EvolutionSettings().excluded_labels == list(EXCLUDED_LABELS)


def test_importing_the_label_constants_is_cheap():
    """Plugin settings modules import the constants when the plugin loads: no pydantic, click or plugin host."""
    code = ("import sys; import seal_platform.labels; "
            "print(sorted(m for m in ('click', 'pydantic', 'rich', 'seal_platform.plugins') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
