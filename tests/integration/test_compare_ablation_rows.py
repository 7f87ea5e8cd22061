"""benchmarks/compare_ablation_rows.py: two ablation results files compared field by field, paired by
(recipe, seed), wall times, loads and run ids left out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "compare_ablation_rows.py"


def _row(recipe, seed, *, run_id="r1", wall=100.0, load=(1.0, 2.0), named=40.0, rewards=(0.25, 0.5)):
    return {"run_id": run_id, "recipe": recipe, "seed": seed, "wall_s": wall, "load": list(load),
            "evaluations": {"3": {"average": 50.0, "per_category": {"named": named, "direct": 60.0}, "n_tasks": 32}},
            "train_rewards": list(rewards), "labels": {"pass": 10, "invalid_tool_call": 6}}


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _compare(a, b, *extra):
    done = subprocess.run([sys.executable, str(SCRIPT), str(a), str(b), *extra], capture_output=True, text=True)
    return done.returncode, done.stdout


def test_rows_that_differ_only_in_wall_time_load_and_run_id_are_identical(tmp_path):
    a = _write(tmp_path / "a.jsonl", [_row("base model", None), _row("smarthome-seal", 0)])
    b = _write(tmp_path / "b.jsonl", [_row("smarthome-seal", 0, run_id="r2", wall=250.5, load=(6.1, 7.3)),
                                      _row("base model", None, run_id="r9", wall=3.0)])
    code, out = _compare(a, b)
    assert code == 0, out
    assert out.strip() == "identical: 2 rows (base model seedNone, smarthome-seal seed0)"


def test_every_differing_figure_and_unpaired_row_is_named(tmp_path):
    a = _write(tmp_path / "a.jsonl", [_row("smarthome-seal", 0), _row("smarthome-seal", 1)])
    b = _write(tmp_path / "b.jsonl", [_row("smarthome-seal", 0, named=43.75, rewards=(0.25, 0.4375)),
                                      _row("smarthome-random-labels", 0)])
    code, out = _compare(a, b)
    assert code == 1
    assert out.splitlines() == [
        "smarthome-random-labels seed0: only in the second file",
        "smarthome-seal seed0 evaluations.3.per_category.named: 40.0 != 43.75",
        "smarthome-seal seed0 train_rewards[1]: 0.5 != 0.4375",
        "smarthome-seal seed1: only in the first file",
        "4 differences",
    ]
    # --ignore leaves further fields out
    code, out = _compare(a, b, "--ignore", "evaluations", "train_rewards")
    assert "per_category" not in out and "train_rewards" not in out and code == 1


def test_a_row_repeated_in_one_file_is_refused(tmp_path):
    a = _write(tmp_path / "a.jsonl", [_row("smarthome-seal", 0), _row("smarthome-seal", 0)])
    done = subprocess.run([sys.executable, str(SCRIPT), str(a), str(a)], capture_output=True, text=True)
    assert "a second row for recipe 'smarthome-seal' seed 0" in done.stderr and "Traceback" not in done.stderr
    assert done.returncode != 0
