"""The run loop: call order, keyword arguments, single owners, store rows, failures and resume."""

from __future__ import annotations

import sys

import pytest

from seal_platform.errors import PluginError
from seal_platform.loop import Runner, run_plan
from seal_platform.planning import load_recipe, plan_recipe, prepare
from seal_platform.plugins import make_plugin_manager
from seal_platform.store import RunStore


def _runner(recipe, overrides=(), resume=None):
    plan = plan_recipe(recipe, overrides)
    store = RunStore(plan.config.store_url())
    return Runner(plan, plan.host, store, recipe=plan.source, resume_run_id=resume), store


def test_recipe_to_plan_to_run_in_two_calls(toy_site, toy_recipe):
    plan = plan_recipe(toy_recipe, ["training.steps=2", "training.checkpoint_every=0"])
    assert plan.env_owner == "toy" and plan.source == str(toy_recipe) and plan.host.is_loaded("toy")
    summary = run_plan(plan)
    assert summary.status == "completed" and summary.steps_done == 2
    run = RunStore(plan.config.store_url()).get_run(summary.run_id)
    assert run.status == "completed" and run.recipe == str(toy_recipe) and run.last_step == 1


def test_one_step_calls_every_stage_in_order_with_keywords(toy_site, toy_recipe):
    runner, _ = _runner(toy_recipe, ["training.steps=1", "training.checkpoint_every=0"])
    runner.run()
    plugin = sys.modules["toy_plugin"].plugin
    assert plugin.calls == [
        "check_machine",  # before anything is written or loaded
        "start_run",
        "evaluate",  # before training
        "evolve_interface",  # with the empty state, before the first rollouts
        "collect", "diagnose", "evolve_interface", "reweight", "optimize",
        "save_checkpoint",  # the final checkpoint
        "evaluate",  # at the end
        "end_run:completed",
    ]
    assert plugin.seen_kwargs["collect"] == {"ctx", "environment", "engine", "tasks", "interface", "group_size", "step"}
    assert plugin.seen_kwargs["optimize"] == {"ctx", "engine", "trajectories", "weights", "step", "rollouts"}
    assert plugin.seen_kwargs["reweight"] == {"ctx", "trajectories", "labels", "state", "step"}


def test_evaluation_schedule_and_checkpoints(toy_site, toy_recipe):
    runner, store = _runner(toy_recipe, ["training.steps=5", "evaluation.every=2", "training.checkpoint_every=2"])
    summary = runner.run()
    assert sorted(summary.evaluations) == [0, 2, 4, 5]
    assert [c.step for c in store.checkpoints(runner.run_id)] == [1, 3, 4]
    plugin = sys.modules["toy_plugin"].plugin
    assert plugin.calls.count("optimize") == 5


def test_run_writes_a_complete_run_to_the_store(toy_site, toy_recipe):
    runner, store = _runner(toy_recipe)
    summary = runner.run()
    run = store.get_run(runner.run_id)
    assert run.status == "completed" and run.last_step == 2 and run.seed == 7
    assert run.config["environment"] == "toy" and len(run.config_hash) == 16
    plugins = {p.name: p for p in store.run_plugins(run.id)}
    assert plugins["toy"].version == "0.3.0" and plugins["toy"].distribution == "seal-toy"
    assert {"collect", "optimize", "evaluate", "diagnose"} <= set(plugins["toy"].hooks)
    steps = store.steps(run.id)
    assert [s.step for s in steps] == [0, 1, 2]
    assert all(s.n_trajectories == 8 for s in steps)  # 4 tasks x group of 2
    assert steps[-1].metrics["skill"] == pytest.approx(0.5)
    assert set(steps[0].timings) == {"collect", "diagnose", "evolve_interface", "reweight", "optimize"}
    assert steps[-1].capability_state["totals"]["trajectories"] == 24
    trajs = store.trajectories(run.id, phase="train")
    assert len(trajs) == 24 and len({t.group for t in trajs}) == 12
    assert len(store.labels(run.id)) == 24
    weights = store.label_weights(run.id)
    assert {(w.step, w.label) for w in weights} == {(s, l) for s in range(3) for l in ("pass", "wrong_sum")}
    evals = store.evaluations(run.id)
    assert {e.step for e in evals} == {0, 2, 3} and {e.category for e in evals} == {"big", "small"}
    revisions = store.interfaces(run.id)
    assert revisions[0].revision == 0 and revisions[0].parent is None
    assert summary.interface_revision == len(revisions) - 1
    for rev in revisions[1:]:
        assert rev.parent == rev.revision - 1 and rev.driven_by == ["wrong_sum"] and "+" in rev.diff


def test_a_failing_stage_names_the_plugin_and_marks_the_run_failed(toy_site, toy_recipe):
    runner, store = _runner(toy_recipe, ["settings.toy.fail_in=reweight"])
    with pytest.raises(PluginError, match="'reweight' stage failed in plugin 'toy'.*toy failure"):
        runner.run()
    run = store.get_run(runner.run_id)
    assert run.status == "failed" and "toy failure in reweight" in run.error
    assert [e.kind for e in store.events(run.id) if e.kind not in ("stage_time", "task_data")] == ["crash"]
    assert "end_run:failed" in sys.modules["toy_plugin"].plugin.calls


def test_single_owner_stage_calls_only_the_named_plugin(toy_site, toy_recipe):
    class Intruder:
        from seal_platform.hookspecs import hookimpl

        def __init__(self):
            self.called = []

        @hookimpl
        def optimize(self, step):
            self.called.append(step)
            return {"intruder": 1.0}

    intruder = Intruder()
    config, _, path = load_recipe(str(toy_recipe), ["training.steps=1"])
    host = make_plugin_manager(allow=["toy"], extra=[("intruder", intruder)])
    runner = Runner(prepare(config, host, str(path)), host, RunStore(config.store_url()))
    runner.run()
    assert intruder.called == []
    assert "intruder" not in runner.store.steps(runner.run_id)[0].metrics


def test_resume_continues_after_the_last_checkpoint(toy_site, toy_recipe, tmp_path):
    flag = tmp_path / "interrupt"
    flag.touch()
    overrides = ["training.steps=5", "training.checkpoint_every=2", "evaluation.every=0",
                 f"settings.toy.interrupt_file={flag}", "settings.toy.interrupt_step=3"]
    runner, store = _runner(toy_recipe, overrides)
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    assert store.get_run(runner.run_id).status == "interrupted"
    assert [s.step for s in store.steps(runner.run_id)] == [0, 1, 2]
    assert [c.step for c in store.checkpoints(runner.run_id)] == [1]
    skill_at_checkpoint = store.steps(runner.run_id)[1].metrics["skill"]

    sys.modules.pop("toy_plugin", None)
    resumed, store2 = _runner(toy_recipe, overrides, resume=runner.run_id)
    summary = resumed.run()
    assert summary.run_id == runner.run_id
    assert store2.get_run(runner.run_id).status == "completed"
    steps = store2.steps(runner.run_id)
    assert [s.step for s in steps] == [0, 1, 2, 3, 4]
    # Step 2 was re-done from the checkpoint taken after step 1: the skill continued from there.
    assert steps[2].metrics["skill"] == pytest.approx(skill_at_checkpoint + 0.1)
    new_calls = sys.modules["toy_plugin"].plugin.calls
    assert new_calls[:3] == ["check_machine", "start_run", "load_checkpoint"]
    assert new_calls.count("collect") == 3
    assert "resume" in [e.kind for e in store2.events(runner.run_id)]
    # The capability state was restored: totals count every trajectory of steps 0..4 exactly once.
    assert steps[-1].capability_state["totals"]["trajectories"] == 5 * 8


def test_a_machine_a_plugin_refuses_stops_the_run_before_anything_is_written(toy_site, toy_recipe, tmp_path):
    from click.testing import CliRunner

    from seal_platform.cli import cli

    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "settings.toy.refuse_machine=no GPU here",
                                      "--quiet"])
    assert result.exit_code == 2
    assert "cannot run the recipe as written; nothing was started" in result.output and "no GPU here" in result.output
    assert sys.modules["toy_plugin"].plugin.calls == ["check_machine"]  # no start_run, no model, no engine
    store = RunStore(f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}")
    assert store.list_runs() == []


def test_a_split_the_environment_lacks_is_refused_before_the_engine_is_built(toy_recipe, toy_site, tmp_path):
    """The environment and its tasks come before the engine, whose model load can take minutes: a bad split
    fails the run at once, with the environment's own message, and no engine is ever built."""
    from click.testing import CliRunner

    from seal_platform.cli import cli

    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "evaluation.split=nope", "--quiet"])
    assert result.exit_code != 0
    assert "unknown split 'nope'" in result.output, result.output
    plugin = sys.modules["toy_plugin"].plugin
    assert plugin.engines_built == 0 and "collect" not in plugin.calls
    (row,) = RunStore(f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}").list_runs()
    assert row.status == "failed" and "unknown split 'nope'" in (row.error or "")
