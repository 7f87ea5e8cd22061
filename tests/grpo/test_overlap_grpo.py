"""Overlapped rollouts with the real learner: the grpo plugin on the smarthome environment and a tiny random
model, the hf engine on a private copy of the weights. The core's overlap logic is tested on the toy plugin
(tests/core/test_overlap.py); here the versions the engine stamps and the staleness rule grpo applies must
agree with it: a prefetched step is sampled with the weights from before the previous update, one version
per trajectory, kept (grpo.max_staleness 1) and trained on."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from seal_platform.errors import ConfigError  # noqa: E402
from seal_platform.loop import Runner  # noqa: E402
from seal_platform.planning import plan_recipe  # noqa: E402
from seal_platform.store import RunStore  # noqa: E402

SMALL = [
    "training.steps=3",
    "training.tasks_per_step=1",
    "training.group_size=2",
    "rollout.workers=2",
    "rollout.max_new_tokens=8",
    "evaluation.max_new_tokens=8",
    "evaluation.before_training=false",
    "evaluation.every=0",
    "training.checkpoint_every=0",
    "settings.smarthome.n_eval=2",
    "rollout.dynamic_sampling.enabled=false",
    "settings.grpo.train_layers=1",
    "settings.grpo.zero_advantage=compute",
    "settings.grpo.kl_coef=0",
    "rollout.overlap=true",
    "settings.grpo.max_staleness=1",
    "rollout.engine=hf",
    "settings.engine.hf.share_model=false",
]


def test_grpo_trains_on_overlapped_rollouts_one_version_behind(tmp_path, tiny_model_dir):
    plan = plan_recipe(
        "smarthome-random-labels", [*SMALL, f"runs_dir={tmp_path}", f"settings.policy.model={tiny_model_dir}"]
    )
    store = RunStore(plan.config.store_url())
    runner = Runner(plan, plan.host, store, recipe=plan.source)
    runner.run()
    assert store.get_run(runner.run_id).status == "completed"
    steps = store.steps(runner.run_id)
    assert [s.step for s in steps] == [0, 1, 2]
    for row in steps:
        trajs = store.trajectories(runner.run_id, step=row.step, phase="train")
        versions = [{m.policy_version for m in t.messages if m.trainable} for t in trajs]
        # Step 0 is sampled with the initial weights; steps 1 and 2 while the step before trained, i.e. with
        # the weights from before its update (one update per step): versions 0, 0, 1.
        expected = max(0, row.step - 1)
        assert versions and all(v == {expected} for v in versions), (row.step, versions)
        assert row.metrics.get("updates") == 1.0, (row.step, row.metrics, row.timings)
        assert row.metrics["policy_staleness_max"] == float(min(row.step, 1))
        assert row.metrics["stale_refused_frac"] == 0.0  # within grpo.max_staleness: trained on
        assert ("rollouts_overlapped" in row.metrics) == (row.step > 0)


def test_the_default_max_staleness_refuses_overlap(tmp_path, tiny_model_dir):
    with pytest.raises(ConfigError, match="settings.grpo.max_staleness"):
        plan_recipe("smarthome-random-labels", [*SMALL, "settings.grpo.max_staleness=0", f"runs_dir={tmp_path}",
                                                f"settings.policy.model={tiny_model_dir}"])
