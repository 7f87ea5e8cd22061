"""Kill-anywhere (slow): SIGKILL a tiny-model run 20+ times, at least 3 times in each of start-up, rollout,
update, store write, checkpoint write and evaluation, resume it each time; every finished store equals the
uninterrupted run's (steps, trajectories, labels, weights per label, evaluations, interfaces, checkpoints),
the final weights are bitwise equal, and the partial checkpoint directories the kills left are removed by
the resumes. The work is benchmarks/kill_anywhere.py (a forked, pre-imported child per attempt, kills aimed
at stages from the uninterrupted run's timeline); the fast checks of the same logic are in
tests/core/test_resume_reliability.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("startup", "rollout", "update", "store write", "checkpoint write", "evaluation")


@pytest.mark.slow
def test_twenty_kills_spread_over_the_stages_lose_nothing(tmp_path, tiny_model_dir):
    out = tmp_path / "summary.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "kill_anywhere.py"), "--kills", "20", "--per-stage", "3",
         "--model", str(tiny_model_dir), "--workdir", str(tmp_path / "work"), "--json", str(out)],
        capture_output=True, text=True, timeout=1800,
    )
    assert out.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert summary["kills"] >= 20
    landed = summary["kills_per_stage"]
    assert all(landed.get(stage, 0) >= 3 for stage in STAGES), landed
    assert sum(landed.values()) == summary["kills"]
    # Kills inside checkpoint writes left partial directories; the resumes removed every one of them (and
    # the comparison found no directory the store does not know).
    assert summary["kills_leaving_partial_checkpoint_dir"] >= 1
    assert summary["partial_checkpoint_dirs_removed_at_resume"] >= summary["kills_leaving_partial_checkpoint_dir"]
    assert summary["problems"] == [], proc.stdout[-3000:]
    assert summary["weights_bitwise_equal"] and summary["weights_changed_by_training"]
    assert summary["evaluations"] == [0, 2, 4, 6] and summary["steps"] == 6
    assert proc.returncode == 0
