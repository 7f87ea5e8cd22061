"""`recipes/openenv-example.yaml` end to end: the run loop against the example server, started by the plugin as
a real local process, with the tiny random policy on the hf engine (learning is not the point here)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from seal_platform.loop import Runner
from seal_platform.planning import load_recipe, plugin_host_for, prepare
from seal_platform.plugins import make_plugin_manager
from seal_platform.store import RunStore

SMALL = ["training.steps=1", "training.tasks_per_step=2", "training.group_size=2", "rollout.max_new_tokens=8",
         "evaluation.max_new_tokens=8", "evaluation.before_training=false", "settings.openenv.n_eval=2",
         "settings.openenv.max_steps=2", "settings.grpo.train_layers=1", "settings.grpo.micro_batch_size=2",
         "rollout.engine=hf"]
ROOT = Path(__file__).resolve().parents[2]


def _plan(overrides: list[str]):
    config, issues, path = load_recipe(ROOT / "recipes" / "openenv-example.yaml", overrides)
    assert config is not None, issues
    host = plugin_host_for(config)
    if not host.is_loaded("openenv"):  # an install from before the plugin existed: register it from the tree
        from seal_platform_plugins.openenv import plugin

        host = make_plugin_manager(allow=config.plugins.allow, block=config.plugins.block,
                                   extra=[("openenv", plugin)])
    return prepare(config, host, str(path))


def test_the_example_recipe_runs_against_a_local_server(tmp_path, tiny_model_dir, monkeypatch):
    from seal_platform_plugins.openenv import plugin

    monkeypatch.chdir(ROOT)  # the recipe's server path is relative to the repository root
    plan = _plan([*SMALL, f"runs_dir={tmp_path}", f"settings.policy.model={tiny_model_dir}"])
    store = RunStore(plan.config.store_url())
    runner = Runner(plan, plan.host, store, recipe=plan.source)
    runner.run()
    assert store.get_run(runner.run_id).status == "completed"
    trajs = store.trajectories(runner.run_id, step=0, phase="train")
    assert len(trajs) == 4 and not any(t.infra_failure for t in trajs)
    assert all(t.turn_verdicts and t.metadata.get("final_state") for t in trajs)  # reset, steps and state ran
    labels = store.labels(runner.run_id, step=0)
    assert {row.source for row in labels} == {"openenv"}
    assert {row.trajectory_id for row in labels} == {t.id for t in trajs}
    assert plugin._BUILT == []  # end_run stopped the local server
