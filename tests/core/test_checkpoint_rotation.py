"""Checkpoint rotation (training.keep_checkpoints, keep_best_by): the last N and the best by the held-out
evaluation are kept, the rest deleted from the store and the disk only after a newer one is durable."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from seal_platform.checkpoints import CORE_CHECKPOINT_FILE, rotate_checkpoints
from seal_platform.store import RunStore
from seal_platform.types import EvalResult
from tests.core.test_loop import _runner


def _store_with(tmp_path, steps, rates):
    """A run with durable checkpoints after ``steps`` and an evaluation (one category) at s + 1 per rate."""
    store = RunStore(f"sqlite:///{tmp_path / 'store.sqlite'}")
    store.create_run("r", name="n", recipe="", config={}, config_hash="h", seed=0, run_dir=str(tmp_path), plugins=[])
    for step in steps:
        folder = tmp_path / "checkpoints" / f"step-{step:06d}"
        folder.mkdir(parents=True)
        (folder / CORE_CHECKPOINT_FILE).write_text(json.dumps({"step": step}))
        store.add_checkpoint("r", step, str(folder), {})
    for step, rate in rates.items():
        store.add_evaluation("r", step, EvalResult(split="eval", per_category={"a": rate, "b": 0.0}, n_tasks=4),
                             benchmark="toy")
    return store


def test_the_last_n_and_the_best_are_kept(tmp_path):
    store = _store_with(tmp_path, [1, 3, 5, 7, 9], {2: 10.0, 4: 60.0, 6: 20.0, 8: 60.0, 10: 5.0})
    assert rotate_checkpoints(store, "r", keep_last=2, best_by="average", benchmark="toy") == [1, 5]
    kept = [c.step for c in store.checkpoints("r")]
    assert kept == [3, 7, 9]  # last two, and step 3 (evaluated at 4: the earliest of the best)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [f"step-{s:06d}" for s in kept]


def test_best_by_a_category_none_and_no_rotation(tmp_path):
    store = _store_with(tmp_path, [1, 3, 5], {2: 10.0, 4: 5.0, 6: 1.0})
    assert rotate_checkpoints(store, "r", keep_last=None, best_by="average", benchmark="toy") == []
    assert rotate_checkpoints(store, "r", keep_last=1, best_by="a", benchmark="toy") == [3]
    assert rotate_checkpoints(store, "r", keep_last=1, best_by=None, benchmark="toy") == [1]
    assert [c.step for c in store.checkpoints("r")] == [5]
    # Evaluations of another benchmark do not count.
    other = _store_with(tmp_path / "o", [1, 3], {2: 1.0})
    other.add_evaluation("r", 4, EvalResult(split="eval", per_category={"a": 99.0}, n_tasks=1), benchmark="memory")
    assert rotate_checkpoints(other, "r", keep_last=1, best_by="average", benchmark="toy") == []


def test_a_run_keeps_what_rotation_says_and_resumes_from_its_last_checkpoint(toy_site, toy_recipe, tmp_path):
    flag = tmp_path / "interrupt"
    flag.touch()
    overrides = ["training.steps=8", "training.checkpoint_every=1", "evaluation.every=1",
                 "training.keep_checkpoints=2", "training.keep_best_by=null",
                 f"settings.toy.interrupt_file={flag}", "settings.toy.interrupt_step=6"]
    runner, store = _runner(toy_recipe, overrides)
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    assert [c.step for c in store.checkpoints(runner.run_id)] == [4, 5]
    folder = Path(store.get_run(runner.run_id).run_dir) / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["step-000004", "step-000005"]
    sys.modules.pop("toy_plugin", None)
    resumed, store2 = _runner(toy_recipe, overrides, resume=runner.run_id)
    resumed.run()
    assert store2.get_run(runner.run_id).status == "completed"
    assert [s.step for s in store2.steps(runner.run_id)] == list(range(8))
    assert [c.step for c in store2.checkpoints(runner.run_id)] == [6, 7]
    assert any("rotation removed" in e.message for e in store2.events(runner.run_id))
