"""`recipes/mcp-example.yaml` end to end: the run loop against the real example server process, with the tiny
random policy on the hf engine (learning is not the point here; the slow test below runs the embedded model)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("mcp")

from seal_platform.loop import Runner
from seal_platform.planning import plan_recipe
from seal_platform.store import RunStore

SMALL = ["training.steps=1", "training.tasks_per_step=2", "training.group_size=2", "rollout.max_new_tokens=8",
         "evaluation.max_new_tokens=8", "evaluation.before_training=false", "settings.mcp.n_eval=2",
         "settings.grpo.train_layers=1", "settings.grpo.micro_batch_size=2", "rollout.engine=hf"]


ROOT = Path(__file__).resolve().parents[2]


def _run(overrides: list[str]):
    plan = plan_recipe(ROOT / "recipes" / "mcp-example.yaml", overrides)
    store = RunStore(plan.config.store_url())
    runner = Runner(plan, plan.host, store, recipe=plan.source)
    runner.run()
    return runner.run_id, store


def test_the_example_recipe_runs_against_the_real_server(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.chdir(ROOT)  # the recipe's server and task paths are relative to the repository root
    run_id, store = _run([*SMALL, f"runs_dir={tmp_path}", f"settings.policy.model={tiny_model_dir}"])
    assert store.get_run(run_id).status == "completed"
    (step,) = store.steps(run_id)
    trajs = store.trajectories(run_id, step=0, phase="train")
    assert len(trajs) == 4 and not any(t.infra_failure for t in trajs)
    assert all(t.turn_verdicts for t in trajs)  # verified against the reference server
    labels = store.labels(run_id, step=0)
    assert {row.source for row in labels} == {"mcp"} and {row.trajectory_id for row in labels} == {t.id for t in trajs}
    print(step.metrics)


@pytest.mark.slow
def test_the_embedded_model_is_trained_on_the_example(tmp_path, monkeypatch):
    """The embedded SmolLM2-135M passes some episodes and fails others: mixed groups give an update."""
    monkeypatch.chdir(ROOT)
    run_id, store = _run([f"runs_dir={tmp_path}", "training.steps=2", "rollout.engine=hf", "settings.mcp.n_eval=4",
                          "evaluation.before_training=false"])
    steps = store.steps(run_id)
    trajs = [t for s in steps for t in store.trajectories(run_id, step=s.step, phase="train")]
    assert not any(t.infra_failure for t in trajs), [t.infra_failure for t in trajs if t.infra_failure]
    assert any(t.reward == 1.0 for t in trajs) and any(t.reward == 0.0 for t in trajs), [
        (t.messages[-1].content[:120] if t.messages else "", t.finish) for t in trajs]
    assert sum(s.metrics.get("updates", 0) for s in steps) >= 1
