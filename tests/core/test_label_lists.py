"""The label lists have one definition, :mod:`seal_platform.labels`; the core and the plugins derive theirs from it.

A copy of a list cannot drift if there is none: the source of the core and of the shipped plugins holds no
literal list of the reference labels nor of the excluded labels other than the one in ``seal_platform/labels.py``,
no second mapping of the finer labels to the reference labels they refine (``REFINES``), no ``unreached_turn``
literal but ``UNREACHED_LABEL``, and no second list of the BFCL categories (``bfcl/categories.py`` owns it), and
the defaults that use them are the core's values.
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

from seal_platform.labels import EXCLUDED_LABELS, REFERENCE_LABELS, REFINES, UNREACHED_LABEL

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "seal_platform" / "labels.py"
# The BFCL categories' one definition (the bfcl settings and data import it).
CATEGORIES_HOME = ROOT / "plugins" / "bfcl" / "categories.py"


@functools.lru_cache(maxsize=1)
def _sources() -> tuple[tuple[str, ast.AST], ...]:
    """(file, syntax tree) of every module of the core and the shipped plugins, parsed once for all the scans
    below (the trees are only walked)."""
    paths = sorted([*(ROOT / "seal_platform").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")])
    return tuple((str(path.relative_to(ROOT)), ast.parse(path.read_text(), filename=str(path))) for path in paths)


def _strings(node: ast.AST) -> tuple[str, ...] | None:
    """The strings of a list or tuple literal of string constants only; None for anything else."""
    if isinstance(node, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                                                       for e in node.elts):
        return tuple(e.value for e in node.elts if isinstance(e, ast.Constant))
    return None


def _string_literals() -> list[tuple[str, int, set[str]]]:
    """(file, line, strings) of every list, tuple and set literal of the core and the shipped plugins."""
    out = []
    for file, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
                strings = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                if strings:
                    out.append((file, node.lineno, strings))
    return out


def test_no_module_but_seal_platform_labels_spells_out_a_label_list():
    home = str(HOME.relative_to(ROOT))
    # A copy of the excluded labels names both verifier-side labels; a copy of the reference labels names
    # (nearly) all of them. The Table 5 mappings name at most four reference labels and no excluded one.
    lists = [
        (f, line)
        for f, line, strings in _string_literals()
        if {"gt_error", "checker_error"} <= strings or len(strings & set(REFERENCE_LABELS)) >= len(REFERENCE_LABELS) - 2
    ]
    copies = [(f, line) for f, line in lists if f != home]
    assert copies == [], f"label lists spelled out again (derive them from seal_platform.labels): {copies}"
    assert len(lists) == 2  # the rule finds the two definitions in seal_platform/labels.py


def test_no_module_but_seal_platform_labels_spells_out_the_finer_labels_refinements():
    """A dict literal that maps two or more finer labels to the very reference labels :data:`REFINES` gives
    them is a copy of it (a diagnoser with refinements of its own, like mcp's, maps them otherwise)."""
    home = str(HOME.relative_to(ROOT))
    mappings = []
    for file, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                same = [
                    key.value
                    for key, value in zip(node.keys, node.values)
                    if isinstance(key, ast.Constant) and key.value in REFINES and _strings(value) == REFINES[key.value]
                ]
                if len(same) >= 2:
                    mappings.append((file, node.lineno))
    copies = [(f, line) for f, line in mappings if f != home]
    assert copies == [], f"REFINES spelled out again (use seal_platform.labels.REFINES): {copies}"
    assert len(mappings) == 1  # the rule finds the definition in seal_platform/labels.py


def test_no_module_but_seal_platform_labels_spells_out_the_unreached_label():
    home = str(HOME.relative_to(ROOT))
    spelled = [(file, node.lineno) for file, tree in _sources() for node in ast.walk(tree)
               if isinstance(node, ast.Constant) and node.value == UNREACHED_LABEL]
    copies = [(f, line) for f, line in spelled if f != home]
    assert copies == [], f"{UNREACHED_LABEL!r} spelled out again (use seal_platform.labels.UNREACHED_LABEL): {copies}"
    assert len(spelled) == 1


def test_no_module_but_bfcl_categories_spells_out_the_bfcl_categories():
    from seal_platform_plugins.bfcl import categories as home_module
    from seal_platform_plugins.bfcl import data, settings

    home = str(CATEGORIES_HOME.relative_to(ROOT))
    categories = set(home_module.CATEGORIES)
    lists = [(f, line) for f, line, strings in _string_literals() if len(strings & categories) >= 2]
    copies = [(f, line) for f, line in lists if f != home]
    assert copies == [], f"the BFCL categories spelled out again (use bfcl.categories.CATEGORIES): {copies}"
    assert len(lists) == 1
    assert data.CATEGORIES is settings.CATEGORIES is home_module.CATEGORIES


def test_the_bfcl_diagnoser_and_the_llm_judge_refine_by_the_core_mapping():
    from seal_platform_plugins.bfcl import diagnoser
    from seal_platform_plugins.diagnosis_llm import judge

    assert diagnoser.REFINES is REFINES and judge.REFINES is REFINES
    assert set(REFINES) == set(diagnoser.FINE_LABELS) and all(set(refined) <= set(REFERENCE_LABELS)
                                                                for refined in REFINES.values())
    doc = (ROOT / "docs" / "labels.md").read_text()
    table = doc.split("## Finer labels and the mapping", 1)[1].split("## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_]+)` [^|]*\| ([^|]+) \|", table, flags=re.M)
    assert {label: tuple(re.findall(r"`([a-z_]+)`", refined)) for label, refined in rows} == REFINES


def test_the_excluded_labels_are_the_reference_labels_docs_labels_md_marks_excluded():
    doc = (ROOT / "docs" / "labels.md").read_text()
    table = doc.split("## Reference labels", 1)[1].split("## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_]+)` \|.*\| ([^|]+) \|$", table, flags=re.M)
    assert [label for label, weight in rows] == list(REFERENCE_LABELS)
    assert tuple(label for label, weight in rows if weight.strip() == "excluded") == EXCLUDED_LABELS
    assert UNREACHED_LABEL in EXCLUDED_LABELS and REFERENCE_LABELS[-1] == UNREACHED_LABEL


def test_the_core_evolution_excludes_the_core_excluded_labels_by_default():
    from seal_platform_libs.toolenv.evolution import EvolutionSettings

    assert EvolutionSettings().excluded_labels == list(EXCLUDED_LABELS)


def test_importing_the_label_constants_is_cheap():
    """Plugin settings modules import the constants when the plugin loads: no pydantic, click or plugin host."""
    code = ("import sys; import seal_platform.labels; "
            "print(sorted(m for m in ('click', 'pydantic', 'rich', 'seal_platform.plugins') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
