"""evaluation.training_interface: each evaluation point also scored on the run's current training interface
(stored as '<environment>@training'), and refused, before anything runs, for an environment that can only
evaluate on its pristine interface."""

from __future__ import annotations

from click.testing import CliRunner

from seal_platform.cli import cli
from seal_platform.loop import Runner
from seal_platform.planning import load_recipe, prepare
from seal_platform.plugins import make_plugin_manager
from seal_platform.store import RunStore


def _run(toy_recipe, *overrides):
    config, issues, path = load_recipe(toy_recipe, ["training.steps=4", "evaluation.every=2", *overrides])
    assert not issues, issues
    host = make_plugin_manager(allow=["toy"])
    runner = Runner(prepare(config, host, str(path)), host, RunStore(config.store_url()))
    runner.run()
    return runner


def test_each_point_is_also_scored_on_the_training_interface(toy_site, toy_recipe):
    runner = _run(toy_recipe, "evaluation.training_interface=true")
    store, run_id = runner.store, runner.run_id
    pristine = {e.step: e for e in store.evaluations(run_id) if e.benchmark == "toy"}
    training = {e.step: e for e in store.evaluations(run_id) if e.benchmark == "toy@training"}
    assert sorted(pristine) == [0, 2, 4]
    # Step 0's training interface is still the pristine one: not scored twice. Later points are, once the
    # toy environment's interface has evolved (revision 1 after enough wrong sums).
    assert 0 not in training and training and set(training) <= {2, 4}
    for step in training:  # the stored episodes: one pristine and one on the training interface per task
        revisions = sorted(t.interface_revision for t in store.trajectories(run_id, step=step, phase="eval"))
        n = len(revisions) // 2
        assert revisions[:n] == [0] * n and min(revisions[n:]) >= 1
    assert all(t.interface_revision == 0 for t in store.trajectories(run_id, step=0, phase="eval"))


def test_off_by_default_and_nothing_extra_is_stored(toy_site, toy_recipe):
    runner = _run(toy_recipe)
    assert {e.benchmark for e in runner.store.evaluations(runner.run_id)} == {"toy"}


def test_an_environment_that_evaluates_only_on_its_pristine_interface_is_refused(tmp_path):
    recipe = tmp_path / "arith.yaml"
    recipe.write_text("extends: smarthome-seal\nname: arith\nenvironment: arithmetic\n"
                      "diagnosis: {diagnosers: [arithmetic], primary: arithmetic}\n"
                      "stages: {evolve_interface: null}\nsettings: {smarthome: null}\n")
    result = CliRunner().invoke(cli, ["config", "validate", str(recipe), "evaluation.training_interface=true"])
    assert result.exit_code == 1, result.output
    assert "evaluation.training_interface" in result.output and "'arithmetic'" in result.output


def test_the_eval_command_scores_a_checkpoint_on_the_training_interface_it_had(toy_site, toy_recipe):
    from seal_platform.loop import evaluate_checkpoint
    from seal_platform.planning import plan_recipe
    from seal_platform.present.digest import load_digest
    from seal_platform.store import EVAL_BY_COMMAND

    overrides = ["training.steps=4", "training.checkpoint_every=2", "evaluation.every=0"]
    runner = _run(toy_recipe, *overrides)
    store, run_id = runner.store, runner.run_id
    plan = plan_recipe(toy_recipe, overrides)
    done, on_training = evaluate_checkpoint(store, plan.host, plan, run_id, training_interface=True)
    _, pristine = evaluate_checkpoint(store, plan.host, plan, run_id)
    by_command = {e.benchmark for e in store.evaluations(run_id, origin=EVAL_BY_COMMAND)}
    assert done == 4 and by_command == {"toy", "toy@training"}
    assert {entry.eval_set for entry in load_digest(store, run_id).checkpoint_evaluations} == {"toy:eval",
                                                                                              "toy@training:eval"}
    assert on_training.n_tasks == pristine.n_tasks
    assert {t.interface_revision for t in pristine.trajectories} == {0}
    assert {t.interface_revision for t in on_training.trajectories} == {runner.interface.revision} != {0}
