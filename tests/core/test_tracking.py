"""The ``track`` hook: what the run loop hands trackers, in which order, and that a failing tracker is only
recorded; plus the TensorBoard example tracker switched on by a recipe, end to end."""

from __future__ import annotations

import pytest

from seal_platform import hookimpl
from seal_platform.loop import Runner
from seal_platform.planning import load_recipe, prepare
from seal_platform.plugins import make_plugin_manager
from seal_platform.store import RunStore


class Recorder:
    def __init__(self, fail_on: str | None = None):
        self.events = []
        self.fail_on = fail_on

    @hookimpl
    def track(self, event):
        self.events.append(event)
        if event.kind == self.fail_on:
            raise RuntimeError("tracker down")


def _run(toy_recipe, *trackers, overrides=()):
    config, issues, path = load_recipe(toy_recipe, ["training.steps=2", "evaluation.every=0", *overrides])
    assert not issues
    host = make_plugin_manager(allow=["toy"], extra=[(f"rec{i}", t) for i, t in enumerate(trackers)])
    runner = Runner(prepare(config, host, str(path)), host, RunStore(config.store_url()))
    runner.run()
    return runner


def test_trackers_see_what_the_store_records_in_order(toy_site, toy_recipe):
    recorder = Recorder()
    runner = _run(toy_recipe, recorder)
    kinds = [(e.kind, e.step) for e in recorder.events]
    assert kinds[0] == ("interface", 0) and kinds[1] == ("evaluation", 0)
    assert kinds[-1] == ("evaluation", 2)
    for step in (0, 1):
        assert kinds.index(("labels", step)) + 1 == kinds.index(("step", step))
    store = runner.store
    steps = store.steps(runner.run_id)
    by_step = {e.step: e for e in recorder.events if e.kind == "step"}
    for row in steps:
        assert by_step[row.step].metrics["loss"] == pytest.approx(row.metrics["loss"])
        assert "time/collect" in by_step[row.step].metrics and "reward/mean" in by_step[row.step].metrics
    labels = [e for e in recorder.events if e.kind == "labels"]
    assert all(lab.source == "toy" for e in labels for lab in e.labels) and labels[0].labels
    revisions = [e.interface.revision for e in recorder.events if e.kind == "interface"]
    assert (
        revisions == sorted(revisions) and revisions[0] == 0 and all(e.run_id == runner.run_id for e in recorder.events)
    )
    final = [e for e in recorder.events if e.kind == "evaluation"][-1].evaluation
    assert final.per_category and final.n_tasks == 6


def test_a_failing_tracker_is_recorded_and_the_others_go_on(toy_site, toy_recipe):
    broken, fine = Recorder(fail_on="step"), Recorder()
    runner = _run(toy_recipe, broken, fine)
    assert runner.store.get_run(runner.run_id).status == "completed"
    assert [e.kind for e in fine.events].count("step") == 2
    failures = [e for e in runner.store.events(runner.run_id) if e.kind == "tracker_failed"]
    assert (
        len(failures) == 2 and "tracker 'rec0' failed" in failures[0].message and "tracker down" in failures[0].message
    )


def test_the_tensorboard_example_switched_on_by_a_recipe(toy_site, toy_recipe, tmp_path):
    pytest.importorskip("seal_tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from seal_platform.loop import run_plan
    from seal_platform.planning import plan_recipe

    plan = plan_recipe(toy_recipe, ["training.steps=2", "evaluation.every=0", "plugins.allow=[toy,tensorboard]",
                                    "settings.tensorboard.enabled=true"])
    summary = run_plan(plan)
    events = EventAccumulator(str(summary.run_dir / "tensorboard"))
    events.Reload()
    scalars = events.Tags()["scalars"]
    assert {"reward/mean", "loss", "eval/average", "interface/revision"} <= set(scalars)
    assert [s.step for s in events.Scalars("loss")] == [0, 1]
    store = RunStore(plan.config.store_url())
    final = store.evaluations(summary.run_id)
    assert events.Scalars("eval/average")[-1].value == pytest.approx(summary.evaluations[2].average)
    assert any(t.startswith("labels/toy/") for t in scalars) and final
    # Off by default: the same run without the switch writes nothing.
    plan = plan_recipe(toy_recipe, ["training.steps=1", "plugins.allow=[toy,tensorboard]"])
    assert not (run_plan(plan).run_dir / "tensorboard").exists()
