"""benchmarks/ablation.py's table: mean and sample std over seeds of the final held-out pass rate."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("ablation_bench", ROOT / "benchmarks" / "ablation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(recipe, seed, final, wall, before=None):
    evals = {"3": {"average": final, "per_category": {"direct": final + 5, "paraphrase": final - 5}, "n_tasks": 8}}
    if before is not None:
        evals["0"] = {"average": before, "per_category": {"direct": before}, "n_tasks": 8}
    return {"recipe": recipe, "seed": seed, "evaluations": evals, "wall_s": wall}


def test_table_reports_mean_spread_and_wall_time_per_recipe():
    ablation = _module()
    rows = [_row("smarthome-seal", 0, 20.0, 100, before=1.0), _row("smarthome-seal", 1, 30.0, 120),
            _row("smarthome-seal", 2, 40.0, 140), _row("smarthome-vanilla-grpo", 0, 10.0, 90),
            {**_row("smarthome-seal", 0, 12.5, 60), "recipe": ablation.BASE, "seed": None}]
    rows[-1]["evaluations"] = {"0": {"average": 12.5, "per_category": {"direct": 12.5}, "n_tasks": 8}}
    lines = ablation.table(rows, ["smarthome-vanilla-grpo", "smarthome-seal"]).splitlines()
    assert lines[2].startswith("| base model | - | 12.5 ± 0.0 |")
    assert lines[3].startswith("| vanilla GRPO | 0 | 10.0 ± 0.0 |")
    seal = lines[4]
    assert seal.startswith("| SEAL | 0,1,2 | 30.0 ± 10.0 | 20.0 / 30.0 / 40.0 |")  # the last evaluation counts
    assert "direct 35.0, paraphrase 25.0" in seal and "120 s (± 20)" in seal
