"""Dynamic sampling (rollout.dynamic_sampling): mixed-outcome groups kept, more tasks drawn up to the round
limit, the counts stored with the step, and a resumed run drawing exactly what the uninterrupted one drew."""

from __future__ import annotations

import sys

from seal_platform import dynamic_sampling as ds
from seal_platform.types import Task, Trajectory
from tests.core.test_loop import _runner
from tests.core.test_resume_reliability import interrupted_then_resumed

DS = ["rollout.dynamic_sampling.enabled=true", "training.tasks_per_step=2", "training.group_size=3",
      "training.checkpoint_every=0", "evaluation.every=0", "settings.toy.n_tasks=12"]


def _mixed(trajs):
    return {g for g, members in ds.groups_of(trajs).items() if len({t.reward for t in members}) > 1}


def _traj(group: str, reward: float, task: str = "t") -> Trajectory:
    return Trajectory(task_id=task, category="c", group=group, reward=reward)


def test_select_keeps_whole_mixed_groups_in_order_up_to_the_quota():
    trajs = [_traj("a", 0), _traj("a", 0), _traj("b", 1), _traj("b", 0), _traj("c", 1), _traj("c", 1),
             _traj("d", 0), _traj("d", 1), _traj("e", 1), _traj("e", 0)]
    sel = ds.select(trajs, wanted=2, rounds=2, drawn=5)
    assert [t.group for t in sel.kept] == ["b", "b", "d", "d"]
    assert (sel.kept_groups, sel.uniform, sel.surplus) == (2, 2, 1)
    assert sel.metrics() == {"ds_rounds": 2.0, "ds_groups_drawn": 5.0, "ds_groups_kept": 2.0,
                             "ds_groups_uniform": 2.0, "ds_groups_surplus": 1.0}


def test_draw_order_excludes_the_batch_and_depends_only_on_seed_and_step():
    tasks = [Task(id=f"t{i}", category="c", split="train") for i in range(20)]
    batch = tasks[:4]
    order = ds.draw_order(tasks, batch, seed=3, step=5)
    assert {t.id for t in order} == {t.id for t in tasks[4:]}
    assert [t.id for t in order] == [t.id for t in ds.draw_order(list(tasks), list(batch), 3, 5)]
    assert [t.id for t in order] != [t.id for t in ds.draw_order(tasks, batch, 3, 6)]


def test_later_rounds_get_group_names_that_do_not_collide():
    first = [_traj("g0", 0, "a"), _traj("g0", 1, "a")]
    second = [_traj("g0", 1, "b"), _traj("g1", 0, "c")]
    renamed = ds.separate_groups(first, second, 2)
    assert [t.group for t in renamed] == ["g0#r2", "g1#r2"]
    assert ds.separate_groups(first, [_traj("x", 1)], 2)[0].group == "x"


def test_only_mixed_groups_are_trained_on_and_the_counts_are_stored(toy_site, toy_recipe):
    runner, store = _runner(
        toy_recipe,
        DS
        + [
            "training.steps=2",
            "rollout.dynamic_sampling.tasks_per_round=4",
            "rollout.dynamic_sampling.max_rounds=3",
            "settings.toy.outcomes=every_third",
        ],
    )
    runner.run()
    plugin = sys.modules["toy_plugin"].plugin
    for step in store.steps(runner.run_id):
        trajs = store.trajectories(runner.run_id, step=step.step, phase="train")
        m = step.metrics
        groups = ds.groups_of(trajs)
        mixed = _mixed(trajs)
        assert m["ds_groups_drawn"] == len(groups) == len({t.task_id for t in trajs})
        assert 1 <= m["ds_rounds"] <= 3 and len(groups) == 4 * m["ds_rounds"]
        assert m["ds_groups_kept"] == min(2, len(mixed))
        assert m["ds_groups_uniform"] == len(groups) - len(mixed)
        assert m["ds_groups_surplus"] == len(mixed) - m["ds_groups_kept"]
        # A round is drawn only while the step is short of mixed groups.
        if m["ds_rounds"] < 3:
            assert len(mixed) >= 2
    # The last step's reweight and optimize saw exactly its kept groups: whole, mixed, at most the quota.
    last = store.trajectories(runner.run_id, step=1, phase="train")
    seen = set(plugin.seen_trajectories["optimize"])
    assert seen == set(plugin.seen_trajectories["reweight"])
    kept = [t for t in last if t.id in seen]
    assert {t.group for t in kept} <= _mixed(last) and len({t.group for t in kept}) == 2
    assert all(len([t for t in kept if t.group == g]) == 3 for g in {t.group for t in kept})
    # Every rollout was diagnosed, kept or not.
    assert len(store.labels(runner.run_id, step=1)) == len(last)


def test_the_draw_limit_holds_when_no_group_is_mixed(toy_site, toy_recipe):
    runner, store = _runner(toy_recipe, DS + ["training.steps=2", "rollout.dynamic_sampling.max_rounds=3",
                                           "settings.toy.outcomes=never"])
    runner.run()
    plugin = sys.modules["toy_plugin"].plugin
    assert plugin.calls.count("collect") == 2 * 3
    # Nothing to train on: no update; the reweighter still sees the step's labels (its weights follow them).
    assert "optimize" not in plugin.calls and plugin.seen_trajectories["reweight"] == []
    for step in store.steps(runner.run_id):
        assert step.metrics["ds_rounds"] == 3 and step.metrics["ds_groups_kept"] == 0
        assert step.metrics["ds_groups_drawn"] == 6 == step.metrics["ds_groups_uniform"]


def test_the_pool_running_out_ends_the_rounds(toy_site, toy_recipe):
    runner, store = _runner(toy_recipe, DS + ["training.steps=1", "rollout.dynamic_sampling.max_rounds=50",
                                           "settings.toy.n_tasks=5", "settings.toy.outcomes=never"])
    runner.run()
    (step,) = store.steps(runner.run_id)
    assert step.metrics["ds_groups_drawn"] == 5 and step.metrics["ds_rounds"] == 3  # 2 + 2 + 1 tasks


def test_off_by_default_nothing_is_filtered(toy_site, toy_recipe):
    runner, store = _runner(
        toy_recipe, ["training.steps=1", "training.checkpoint_every=0", "settings.toy.outcomes=never"]
    )
    runner.run()
    plugin = sys.modules["toy_plugin"].plugin
    assert plugin.calls.count("collect") == 1 and "optimize" in plugin.calls
    assert not any(k.startswith("ds_") for k in store.steps(runner.run_id)[0].metrics)


def _train_history(store, run_id):
    """Per step: its metrics and its training trajectories (task, group, sample, reward)."""
    return {s.step: (s.metrics, sorted((t.task_id, t.group, t.sample, t.reward)
                                       for t in store.trajectories(run_id, step=s.step, phase="train")))
            for s in store.steps(run_id)}


def test_a_resumed_run_draws_and_keeps_what_the_uninterrupted_run_did(toy_site, toy_recipe, tmp_path):
    common = DS + ["training.steps=4", "training.checkpoint_every=1", "rollout.dynamic_sampling.tasks_per_round=3",
                   "settings.toy.outcomes=every_third"]
    whole, store = _runner(toy_recipe, common + [f"runs_dir={tmp_path / 'whole'}"])
    whole.run()
    expected = _train_history(store, whole.run_id)

    cut = common + [f"runs_dir={tmp_path / 'cut'}", "settings.toy.interrupt_step=2"]
    run_id, store2, _ = interrupted_then_resumed(toy_recipe, tmp_path, cut)
    got = _train_history(store2, run_id)
    assert sorted(got) == sorted(expected) == [0, 1, 2, 3]
    for step in expected:
        ds_metrics = {k: v for k, v in expected[step][0].items() if k.startswith("ds_")}
        assert {k: v for k, v in got[step][0].items() if k.startswith("ds_")} == ds_metrics
        assert got[step][1] == expected[step][1]


def test_runs_and_show_json_expose_evaluations_and_the_summary_the_learning(toy_site, toy_recipe, tmp_path):
    import json

    from click.testing import CliRunner

    from seal_platform.cli import cli

    runner = CliRunner()
    result = runner.invoke(cli, ["run", str(toy_recipe), *DS, "training.steps=3", "settings.toy.outcomes=every_third",
                                 "evaluation.max_tasks=6", "--quiet"], terminal_width=200)
    assert result.exit_code == 0, result.output
    run_id = result.output.split("run ", 1)[1].split()[0]
    store = f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"
    (row,) = json.loads(runner.invoke(cli, ["runs", "--store", store, "--json"]).output)
    digest = json.loads(runner.invoke(cli, ["show", run_id, "--store", store, "--json"]).output)
    points = row["evaluations"]["toy:eval"]
    assert [p["step"] for p in points] == [0, 3] and all(p["n_tasks"] == 6 for p in points)
    shown = digest["evaluations"]["toy:eval"]
    assert [p["average"] for p in shown] == [p["pass_rate"] for p in points]
    assert row["updates"] == sum(s["metrics"].get("updates", 0) for s in digest["steps"]) and row["seed"] == 7
    # The end-of-run summary: before -> after with the number of tasks and updates, and the sampling counts.
    before, after = points[0]["pass_rate"], points[1]["pass_rate"]
    assert f"toy:eval: {before:.1f}% -> {after:.1f}%" in result.output
    assert "evaluated after step 0 and after step 3" in result.output
    assert "points, 6 tasks)" in result.output and "policy update(s) in between" in result.output
    kept = sum(s["metrics"]["ds_groups_kept"] for s in digest["steps"])
    assert f"{int(kept)} trained on (mixed outcomes)" in result.output
    shown_text = runner.invoke(cli, ["show", run_id, "--store", store], terminal_width=200).output
    first = digest["steps"][0]["metrics"]
    assert f"{int(first['ds_groups_kept'])}/{int(first['ds_groups_drawn'])}" in shown_text
    page = (tmp_path / "runs" / run_id / "report.html").read_text()
    assert "Dynamic sampling" in page and "kept (mixed)" in page


def test_keep_surplus_keeps_every_mixed_group_drawn():
    trajs = [_traj("a", 0), _traj("a", 0), _traj("b", 1), _traj("b", 0), _traj("c", 1), _traj("c", 1),
             _traj("d", 0), _traj("d", 1), _traj("e", 1), _traj("e", 0)]
    sel = ds.select(trajs, wanted=2, rounds=2, drawn=5, keep_surplus=True)
    assert [t.group for t in sel.kept] == ["b", "b", "d", "d", "e", "e"]
    assert (sel.kept_groups, sel.uniform, sel.surplus) == (3, 2, 0)


def test_with_keep_surplus_the_update_is_sized_to_every_mixed_group_drawn(toy_site, toy_recipe):
    runner, store = _runner(toy_recipe, DS + ["training.steps=2", "rollout.dynamic_sampling.tasks_per_round=6",
                                           "rollout.dynamic_sampling.max_rounds=3", "settings.toy.outcomes=every_third",
                                           "rollout.dynamic_sampling.keep_surplus=true"])
    runner.run()
    plugin = sys.modules["toy_plugin"].plugin
    for step in store.steps(runner.run_id):
        trajs = store.trajectories(runner.run_id, step=step.step, phase="train")
        assert step.metrics["ds_groups_kept"] == len(_mixed(trajs)) and step.metrics["ds_groups_surplus"] == 0
    assert any(step.metrics["ds_groups_kept"] > 2 for step in store.steps(runner.run_id))  # more than the quota
    last = store.trajectories(runner.run_id, step=1, phase="train")
    seen = set(plugin.seen_trajectories["optimize"])
    assert {t.group for t in last if t.id in seen} == _mixed(last) and len(_mixed(last)) >= 2
