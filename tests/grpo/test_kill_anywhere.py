"""Kill-anywhere (slow): SIGKILL a tiny-model run at 20+ random moments, resume it each time; every finished
store equals the uninterrupted run's (steps, trajectories, labels, weights per label, evaluations,
interfaces, checkpoints) and the final weights are bitwise equal. The work is benchmarks/kill_anywhere.py
(a forked, pre-imported child per attempt); the fast checks of the same logic are in
tests/core/test_resume_reliability.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_twenty_random_kills_lose_nothing(tmp_path, tiny_model_dir):
    out = tmp_path / "summary.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "kill_anywhere.py"), "--kills", "20", "--model", str(tiny_model_dir),
         "--workdir", str(tmp_path / "work"), "--json", str(out)],
        capture_output=True, text=True, timeout=1800,
    )
    assert out.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert summary["kills"] >= 20
    assert summary["problems"] == [], proc.stdout[-3000:]
    assert summary["weights_bitwise_equal"] and summary["weights_changed_by_training"]
    assert summary["evaluations"] == [0, 2, 4, 6] and summary["steps"] == 6
    assert proc.returncode == 0
