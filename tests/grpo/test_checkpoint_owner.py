"""The grpo plugin writes its checkpoint files only into runs that use it (it optimizes or reweights, or the
rollout engine is one of its own): a run of other plugins with grpo installed gets no ``grpo/`` folder, and
resuming such a run reads none. The toy plugin of the core's tests runs every stage; grpo is the real one,
loaded from its entry point."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from seal_platform.loop import Runner
from seal_platform.planning import plan_recipe
from seal_platform.store import RunStore
from tests.core.conftest import toy_recipe, toy_site  # noqa: F401  (fixtures)

pytest.importorskip("torch")


def _runner(recipe, overrides, resume=None):
    plan = plan_recipe(recipe, overrides)
    assert plan.host is not None and plan.host.is_loaded("grpo")
    store = RunStore(plan.config.store_url())
    return Runner(plan, plan.host, store, recipe=plan.source, resume_run_id=resume), store


def test_a_run_that_does_not_use_grpo_gets_no_grpo_checkpoint_files_and_resumes(toy_site, toy_recipe, tmp_path,  # noqa: F811
                                                                                monkeypatch):
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    flag = tmp_path / "interrupt"
    flag.touch()
    overrides = ["plugins.allow=[toy,grpo]", "training.steps=3", "training.checkpoint_every=1", "evaluation.every=0",
                 f"settings.toy.interrupt_file={flag}", "settings.toy.interrupt_step=2"]
    runner, store = _runner(toy_recipe, overrides)
    assert runner.config.stages.optimize == "toy" and runner.config.rollout.engine == "toy-engine"
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    checkpoints = store.checkpoints(runner.run_id)
    assert [c.step for c in checkpoints] == [0, 1]
    for checkpoint in checkpoints:
        folder = Path(checkpoint.path)
        assert (folder / "toy.json").is_file()  # the optimizer's own state is there
        assert not (folder / "grpo").exists(), sorted(p.name for p in folder.iterdir())
    # Resumed: grpo's load_checkpoint reads nothing (there is nothing to read), the run completes.
    sys.modules.pop("toy_plugin", None)
    resumed, store = _runner(toy_recipe, overrides, resume=runner.run_id)
    assert resumed.run().status == "completed"
    assert store.get_run(runner.run_id).status == "completed"
    assert "load_checkpoint" in sys.modules["toy_plugin"].plugin.calls


def test_a_run_where_grpo_only_reweights_keeps_its_a_patch_state(toy_site, toy_recipe, monkeypatch):  # noqa: F811
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    runner, store = _runner(toy_recipe, ["plugins.allow=[toy,grpo]", "stages.reweight=grpo", "training.steps=1",
                                         "evaluation.every=0"])
    runner.run()
    [checkpoint] = store.checkpoints(runner.run_id)
    grpo = Path(checkpoint.path) / "grpo"
    assert (grpo / "state.json").is_file() and (grpo / "rng.pt").is_file()
    assert not (grpo / "model.safetensors").exists()  # another plugin optimizes: no policy of grpo's
