"""Policy versions: engines stamp generations, the trainer refuses (or importance-corrects) stale samples."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from test_trainer import make_trajectories  # noqa: E402

from seal_platform.engine import TrainableEngine
from seal_platform.types import Message, SamplingParams  # noqa: E402
from seal_platform_plugins.grpo import staleness  # noqa: E402
from seal_platform_plugins.grpo.run import GRPORun  # noqa: E402
from seal_platform_plugins.grpo.samples import build_samples  # noqa: E402
from seal_platform_plugins.grpo.settings import GRPOSettings  # noqa: E402
from seal_platform_plugins.grpo.trainer import GRPOTrainer  # noqa: E402


def _stamp(trajectories, versions):
    for traj, version in zip(trajectories, versions):
        for m in traj.messages:
            if m.trainable:
                m.policy_version = version
    return trajectories


def test_hf_engine_stamps_the_version_it_sampled_with(tiny_policy):
    from seal_platform_libs.policy.engines.hf import HFEngine

    model, tokenizer = tiny_policy
    engine = HFEngine(model, tokenizer)
    try:
        conv = [Message(role="user", content="Hello")]
        sampling = SamplingParams(temperature=0.0, max_new_tokens=3)
        assert engine.generate([conv], sampling)[0].policy_version == 0
        engine.update_weights(model, version=7)
        assert engine.generate([conv], sampling)[0].policy_version == 7
        engine.update_weights(model)
        assert engine.generate([conv], sampling)[0].policy_version == 8
    finally:
        engine.close()


def test_screen_refuses_or_marks_stale_trajectories(tokenizer):
    trajs = _stamp(make_trajectories(tokenizer), [5, 4, 3, 5, None, 5])
    refused = staleness.screen(trajs, current=5, max_staleness=1, mode="refuse")
    assert [t.id for t in refused.kept] == [t.id for i, t in enumerate(trajs) if i != 2]
    assert refused.metrics["stale_refused_frac"] == pytest.approx(1 / 6)
    assert refused.metrics["policy_staleness_max"] == 2.0
    corrected = staleness.screen(trajs, current=5, max_staleness=0, mode="importance_correct")
    assert len(corrected.kept) == 6 and corrected.corrected == {trajs[1].id, trajs[2].id}


def test_trainer_refuses_stale_samples(tiny_policy):
    model, tokenizer = tiny_policy
    run = GRPORun(model, tokenizer, GRPOSettings(kl_coef=0.0, lr=1e-4, max_staleness=1), apatch=None)
    run.trainer.updates = 3
    trajs = _stamp(make_trajectories(tokenizer), [3, 3, 1, 3, 3, 3])
    metrics = run.optimize(None, trajs, {}, screen_stale=True)
    assert metrics["stale_refused_frac"] == pytest.approx(1 / 6)
    # The refused sample is g0's third: g0 trains on rewards (1, 0), g1 on (0, 1, 1); all 5 have an advantage.
    assert metrics["trained_sequences"] == 5.0


def test_importance_correction_scales_the_policy_gradient(tiny_policy):
    # At the first update the ratio is 1 and nothing is clipped, so an importance weight w on every token of a
    # trajectory must act exactly like scaling that trajectory's advantage by w.
    model, tokenizer = tiny_policy
    settings = GRPOSettings(kl_coef=0.0, lr=1e-12, mini_batch_tasks=8)
    trajs = make_trajectories(tokenizer, rewards=((1.0, 0.0, 0.0),))
    first = trajs[0].id

    def pg_loss(weights, cap=None, halve=False):
        samples = build_samples(tokenizer, trajs, weights, settings)
        if cap is not None:
            probe = build_samples(tokenizer, trajs, None, settings)
            GRPOTrainer(model, settings).fill_logprobs(model, probe, "old_logp")
            # The engine gave the first trajectory's tokens half the probability the policy gives them.
            samples[0].engine_logprobs = (probe[0].old_logp - math.log(2.0)).tolist()
            samples[0].importance_cap = cap
        return GRPOTrainer(model, settings).step(samples)["pg_loss"]

    assert pg_loss(None, cap=5.0) == pytest.approx(pg_loss({first: 2.0}), rel=1e-4)
    assert pg_loss(None, cap=1.5) == pytest.approx(pg_loss({first: 1.5}), rel=1e-4)
    assert pg_loss({first: 2.0}) != pytest.approx(pg_loss(None), rel=1e-3)


def test_push_weights_passes_the_version_to_a_trainable_engine_and_skips_others():
    class Versioned(TrainableEngine):
        def update_weights(self, model, version=None):
            self.got = (model, version)

    class Untyped:  # update_weights alone does not make a TrainableEngine (no sleep / wake)
        def update_weights(self, model, version=None):
            self.got = (model, version)

    a, b = Versioned(), Untyped()
    assert staleness.push_weights(a, "m", 4) and a.got == ("m", 4)
    assert not staleness.push_weights(b, "m", 4) and not hasattr(b, "got")
    assert not staleness.push_weights(object(), "m", 4)


def test_colocated_engines_sleep_during_the_update_and_get_the_new_version(tiny_policy):
    model, tokenizer = tiny_policy
    calls = []

    class Engine(TrainableEngine):  # records what the trainer asks of a colocated engine
        def sleep(self):
            calls.append(("sleep", run.trainer.updates))

        def update_weights(self, model, version=None):
            calls.append(("update_weights", version))

    run = GRPORun(model, tokenizer, GRPOSettings(kl_coef=0.0, lr=1e-4), apatch=None)
    engine = Engine()
    run.optimize(engine, make_trajectories(tokenizer), {}, screen_stale=True, sleep=engine.sleep)
    assert calls == [("sleep", 0), ("update_weights", run.trainer.updates)] and run.trainer.updates >= 1
    calls.clear()
    run.optimize(Engine(), make_trajectories(tokenizer), {}, screen_stale=True)
    assert [c[0] for c in calls] == ["update_weights"]
    # A step that trains nothing (every group uniform): an engine that slept for it still gets the weights,
    # since the push is what wakes it (a vLLM engine asleep at level 2 has none); one that did not sleep gets none.
    calls.clear()
    before = run.trainer.updates
    uniform = make_trajectories(tokenizer, rewards=((1.0, 1.0, 1.0), (0.0, 0.0, 0.0)))
    metrics = run.optimize(engine, uniform, {}, screen_stale=True, sleep=engine.sleep)
    assert metrics["updates"] == 0 and run.trainer.updates == before
    assert calls == [("sleep", before), ("update_weights", before)]
    calls.clear()
    run.optimize(Engine(), uniform, {}, screen_stale=True)
    assert calls == []


def test_a_single_process_trainer_leaves_the_push_to_the_driver(tiny_policy):
    # Every trainer the run holds answers push_to_engine; the single-process one pushes nothing itself (its
    # model is the driver's copy), so the run pushes that model, with the new version.
    model, tokenizer = tiny_policy
    got = []

    class Engine(TrainableEngine):
        def update_weights(self, model, version=None):
            got.append((model, version))

    run = GRPORun(model, tokenizer, GRPOSettings(kl_coef=0.0, lr=1e-4), apatch=None)
    assert run.trainer.push_to_engine(Engine(), 7) is False and got == []
    run.optimize(Engine(), make_trajectories(tokenizer), {})
    assert got == [(model, run.trainer.updates)] and run.trainer.updates >= 1


def test_overlapped_rollouts_end_before_the_engine_gets_new_weights(tiny_policy):
    """With rollouts in flight the update overlaps them; the push waits for them (one version per
    trajectory), and an engine that generates with the trainer's own model waits before the update."""
    model, tokenizer = tiny_policy
    calls = []

    class Engine(TrainableEngine):
        model = None

        def update_weights(self, model, version=None):
            calls.append(("update_weights", version))

        def shares_model(self, model):
            return self.model is model

    def wait():
        calls.append(("wait", run.trainer.updates))

    run = GRPORun(model, tokenizer, GRPOSettings(kl_coef=0.0, lr=1e-4), apatch=None)
    run.optimize(Engine(), make_trajectories(tokenizer), {}, screen_stale=True, wait_for_rollouts=wait)
    updated = run.trainer.updates
    assert updated >= 1 and calls == [("wait", updated), ("update_weights", updated)]  # the update ran first

    calls.clear()
    sharing = Engine()
    sharing.model = model  # the hf engine's default: the trainer's own model object
    run.optimize(sharing, make_trajectories(tokenizer), {}, screen_stale=True, wait_for_rollouts=wait)
    assert calls[0] == ("wait", updated) and calls[-1] == ("update_weights", run.trainer.updates)
    assert run.trainer.updates > updated


def test_overlap_is_refused_where_grpo_would_drop_or_mix_its_rollouts():
    from seal_platform.config import RunConfig
    from seal_platform_libs.policy.engines.settings import EngineSettings

    config = RunConfig.model_validate({"environment": "bfcl", "rollout": {"overlap": True, "engine": "hf"},
                                       "training": {"tasks_per_step": 32}, "stages": {"optimize": "grpo"}})
    private = EngineSettings.model_validate({"hf": {"share_model": False}})
    # 32 tasks in mini-batches of 8: 4 updates per step, so overlapped rollouts are 4 versions old.
    assert staleness.updates_per_step(config, GRPOSettings()) == 4
    assert staleness.updates_per_step(config, GRPOSettings(mini_batch_tasks=64, epochs_per_step=2)) == 2
    found = staleness.overlap_issues(config, GRPOSettings(), private, ray=False)
    assert [i.where for i in found] == ["settings.grpo.max_staleness"] and "max_staleness: 4" in found[0].fix
    assert not staleness.overlap_issues(config, GRPOSettings(max_staleness=4), private, ray=False)
    assert not staleness.overlap_issues(config, GRPOSettings(stale_samples="importance_correct"), private, ray=False)
    shared = staleness.overlap_issues(config, GRPOSettings(max_staleness=4), EngineSettings(), ray=False)
    assert [i.where for i in shared] == ["settings.engine.hf.share_model"]
    colocated = GRPOSettings(max_staleness=4, placement={"colocate": True})
    assert [i.where for i in staleness.overlap_issues(config, colocated, EngineSettings(), ray=True)] == [
        "settings.grpo.placement.colocate"]
