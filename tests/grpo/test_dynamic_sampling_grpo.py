"""Dynamic sampling with the real learner: the grpo plugin (A-Patch, GRPO update), the smarthome environment,
the label controls as primary diagnoser, on both rollout engines. The core's selection logic is tested on the
toy plugin (tests/core/test_dynamic_sampling.py); here the same counts must come out of real rollouts.

A random 2-layer model never passes a smarthome turn, so every group is uniform: each step draws until the
round limit, keeps nothing and performs no update, while every rollout is still diagnosed, labelled by the
control and weighed by A-Patch. The slow test runs the embedded SmolLM2, which passes some rollouts: mixed
groups are kept and trained on."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from seal_platform.loop import Runner  # noqa: E402
from seal_platform.planning import plan_recipe  # noqa: E402
from seal_platform.store import RunStore  # noqa: E402

SMALL = ["training.steps=2", "training.tasks_per_step=1", "training.group_size=2", "rollout.workers=4",
         "rollout.max_new_tokens=8", "evaluation.max_new_tokens=8", "evaluation.before_training=false",
         "settings.smarthome.n_eval=2", "rollout.dynamic_sampling.tasks_per_round=2",
         "rollout.dynamic_sampling.max_rounds=2", "settings.grpo.train_layers=1"]


def _run(recipe: str, overrides: list[str]):
    plan = plan_recipe(recipe, overrides)
    store = RunStore(plan.config.store_url())
    runner = Runner(plan, plan.host, store, recipe=plan.source)
    runner.run()
    return runner.run_id, store


# The vLLM cases (~20 s each: an engine start per run) run in `make test-slow`; the hf ones in `make test`.
@pytest.mark.parametrize("engine", ["hf", pytest.param("vllm", marks=[pytest.mark.vllm, pytest.mark.slow])])
@pytest.mark.parametrize("recipe", ["smarthome-random-labels", "smarthome-fixed-label"])
def test_uniform_groups_exhaust_the_draw_limit_and_train_nothing(tmp_path, tiny_model_dir, engine, recipe):
    if engine == "vllm":
        pytest.importorskip("vllm")
    run_id, store = _run(recipe, [*SMALL, f"runs_dir={tmp_path}", f"settings.policy.model={tiny_model_dir}",
                                  f"rollout.engine={engine}", "settings.engine.vllm.max_model_len=2048"])
    assert store.get_run(run_id).status == "completed"
    steps = store.steps(run_id)
    assert [s.step for s in steps] == [0, 1]
    for step in steps:
        m = step.metrics
        trajs = store.trajectories(run_id, step=step.step, phase="train")
        assert all(t.reward == 0.0 for t in trajs)
        # Round 1: the scheduled task topped up to two; round 2: two more. None kept, nothing trained.
        assert (m["ds_rounds"], m["ds_groups_drawn"], m["ds_groups_kept"], m["ds_groups_uniform"]) == (2, 4, 0, 4)
        assert len({t.group for t in trajs}) == 4 and len(trajs) == 8
        assert m.get("updates", 0) == 0
        # Every rollout of every round was diagnosed by the real diagnoser and by the control.
        labels = store.labels(run_id, step=step.step)
        assert {row.source for row in labels} == {"smarthome", recipe.removeprefix("smarthome-").replace("-", "_")}
        assert {row.trajectory_id for row in labels} == {t.id for t in trajs}
    # A-Patch weighed the control's labels after each step.
    assert store.label_weights(run_id), "A-Patch stored no label weights"


# One step, rounds of the 2 scheduled tasks x 4 samples (one hf batch of 8 each), one eval task, two trained
# layers: the recipe's rounds of 6 tasks x 8 samples over 2 steps (up to 18 hf batches of 16) ran for more than
# 15 minutes under a load of 6-12 without finishing.
EMBEDDED_SMALL = ["training.steps=1", "training.group_size=4", "rollout.dynamic_sampling.tasks_per_round=2",
                  "rollout.dynamic_sampling.max_rounds=3", "settings.smarthome.n_eval=1",
                  "evaluation.before_training=false", "settings.grpo.train_layers=2", "rollout.engine=hf"]


@pytest.mark.slow
def test_the_embedded_model_yields_mixed_groups_that_are_trained_on(tmp_path):
    run_id, store = _run("smarthome-embedded", [*EMBEDDED_SMALL, f"runs_dir={tmp_path}"])
    assert store.get_run(run_id).status == "completed"
    steps = store.steps(run_id)
    kept = sum(s.metrics["ds_groups_kept"] for s in steps)
    assert kept >= 1 and sum(s.metrics.get("updates", 0) for s in steps) >= 1
    for step in steps:
        trajs = store.trajectories(run_id, step=step.step, phase="train")
        groups = {t.group for t in trajs}
        mixed = {g for g in groups if len({t.reward for t in trajs if t.group == g}) > 1}
        assert step.metrics["ds_groups_kept"] == min(2, len(mixed))
