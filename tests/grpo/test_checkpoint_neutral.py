"""Writing checkpoints changes nothing a run computes (slow: two tiny-model runs): the same recipe and seed with
a checkpoint after every step and with one only at the end leave the same store (steps, trajectories with
every token and log-prob, labels, label weights, evaluations, interfaces) and bitwise-equal final weights.
benchmarks/ablation.py relies on it when it makes every training run checkpoint each step (to resume it)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


def _kill_anywhere(monkeypatch):
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # one torch thread: reproducible arithmetic
        monkeypatch.setenv(key, "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    spec = importlib.util.spec_from_file_location("kill_anywhere_bench", ROOT / "benchmarks" / "kill_anywhere.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_a_checkpoint_every_step_changes_nothing_the_run_computes(tmp_path, tiny_model_dir, monkeypatch):
    bench = _kill_anywhere(monkeypatch)
    runs = {}
    for every in (1, 0):
        root = tmp_path / f"every-{every}"
        root.mkdir()
        recipe = bench.write_recipe(root, tiny_model_dir, seed=0)
        proc = subprocess.run([sys.executable, "-m", "seal_platform", "run", "--quiet", "--no-report", str(recipe),
                               f"training.checkpoint_every={every}"], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        snap = bench.snapshot(root / "runs" / "store.sqlite")
        snap["weights"] = bench.final_weights(root / "runs" / snap["run_id"])
        runs[every] = snap
    each, end_only = runs[1], runs[0]
    assert each["checkpoints"] == list(range(bench.STEPS)) and end_only["checkpoints"] == [bench.STEPS - 1]
    for key in ("status", "steps", "trajectories", "labels", "label_weights", "evaluations", "interfaces"):
        assert each[key] == end_only[key], key
    assert len(each["trajectories"]) > 0 and len(each["steps"]) == bench.STEPS
    assert each["weights"].keys() == end_only["weights"].keys()
    assert all(torch.equal(each["weights"][k], end_only["weights"][k]) for k in each["weights"])
    from safetensors.torch import load_file

    # The weights moved: the comparison is not between two untrained models.
    start = load_file(str(next(Path(tiny_model_dir).glob("*.safetensors"))))
    assert any(k in start and not torch.equal(v, start[k]) for k, v in each["weights"].items())
