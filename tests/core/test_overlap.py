"""Overlapped rollouts (rollout.overlap): step t + 1 collected while step t trains, one policy version per
trajectory, at most one step behind, never across a checkpoint; a killed and resumed overlapped run stores
exactly the history of an uninterrupted one; with the option off the loop is the synchronous one."""

from __future__ import annotations

import sys
import threading

import pytest

from seal_platform import infra, rollouts
from seal_platform.context import RunContext
from seal_platform.errors import ConfigError
from seal_platform.planning import plan_recipe
from tests.core.test_loop import _runner
from tests.core.test_resume_reliability import interrupted_then_resumed

from .conftest import make_dist

# Episodes slow enough (6 of them at 0.15 s) that the next step's collect is still running when optimize starts.
SLOW = ["training.tasks_per_step=3", "training.group_size=2", "settings.toy.generate_sleep_s=0.15",
        "evaluation.every=0", "evaluation.before_training=false"]


def _versions(store, run_id, step):
    """Each stored training trajectory's set of message policy versions."""
    return [{m.policy_version for m in t.messages if m.trainable}
            for t in store.trajectories(run_id, step=step, phase="train")]


def test_overlapped_steps_are_one_version_each_and_at_most_one_step_behind(toy_site, toy_recipe):
    runner, store = _runner(
        toy_recipe, SLOW + ["rollout.overlap=true", "training.steps=6", "training.checkpoint_every=3"]
    )
    runner.run()
    plugin = sys.modules["toy_plugin"].plugin
    # Prefetched: every step but the first and the one after the checkpoint (after step 2).
    prefetched = {1, 2, 4, 5}
    steps = {s.step: s for s in store.steps(runner.run_id)}
    assert sorted(steps) == [0, 1, 2, 3, 4, 5]
    for step, row in steps.items():
        versions = _versions(store, runner.run_id, step)
        assert versions and all(len(v) == 1 for v in versions), (step, versions)  # no trajectory mixes versions
        sampled = {next(iter(v)) for v in versions}
        # Sampled with the weights from before the previous step's update when prefetched, else the current ones.
        expected = step - 1 if step in prefetched else step
        assert sampled == {expected}, (step, sampled)
        engine_version, seen = plugin.seen_versions[step]
        assert engine_version == step and seen == [expected]
        assert engine_version - expected <= 1  # the staleness bound: one step
        assert ("rollouts_overlapped" in row.metrics) == (step in prefetched)
        assert ("rollout_wait" in row.timings) == (step + 1 in prefetched)
    # The next step's rollouts were being collected while the update ran (before it changed the weights).
    assert all(plugin.in_flight_at_update[step] for step in (0, 1, 3, 4))
    assert not any(plugin.in_flight_at_update[step] for step in (2, 5))


def test_overlap_off_is_the_synchronous_loop(toy_site, toy_recipe):
    runner, store = _runner(toy_recipe, SLOW + ["training.steps=3", "training.checkpoint_every=0"])
    runner.run()
    plugin = sys.modules["toy_plugin"].plugin
    stages = [c for c in plugin.calls if c in ("collect", "diagnose", "evolve_interface", "reweight", "optimize")]
    assert stages == ["evolve_interface"] + ["collect", "diagnose", "evolve_interface", "reweight", "optimize"] * 3
    for row in store.steps(runner.run_id):
        assert _versions(store, runner.run_id, row.step) == [{row.step}] * 6  # on-policy: sampled after every update
        assert plugin.seen_versions[row.step] == (row.step, [row.step])
        assert "rollouts_overlapped" not in row.metrics and "rollout_wait" not in row.timings
    assert plugin.in_flight_at_update == {0: False, 1: False, 2: False}


def _history(store, run_id):
    """Everything a run stored per step, timings and the events aside."""
    out = {}
    for row in store.steps(run_id):
        trajs = store.trajectories(run_id, step=row.step, phase="train")
        out[row.step] = (
            row.metrics, row.interface_revision,
            sorted((t.task_id, t.group, t.sample, t.reward, t.policy_version, [m.content for m in t.messages])
                   for t in trajs),
            sorted((lab.turn, lab.label, lab.source) for lab in store.labels(run_id, row.step)),
        )
    evaluations = sorted((e.step, e.category, e.pass_rate) for e in store.evaluations(run_id))
    interfaces = sorted((r.revision, r.parent, r.step) for r in store.interfaces(run_id))
    return out, evaluations, interfaces


# Three runs of six overlapped steps (~30 s): `make test` keeps overlap's step semantics (above) and exact resume
# (test_ablation_resume.py, test_resume_reliability.py); the two together run in `make test-slow`.
@pytest.mark.slow
def test_a_killed_and_resumed_overlapped_run_stores_the_uninterrupted_history(toy_site, toy_recipe, tmp_path):
    common = SLOW + ["rollout.overlap=true", "training.steps=6", "training.checkpoint_every=2",
                     "rollout.dynamic_sampling.enabled=true", "rollout.dynamic_sampling.max_rounds=2",
                     "settings.toy.restore_rng=true", "evaluation.every=2", "rollout.executor=toy-serial"]
    whole, store = _runner(toy_recipe, common + [f"runs_dir={tmp_path / 'whole'}"])
    whole.run()
    expected = _history(store, whole.run_id)

    # Killed in step 2's update, while step 3's rollouts are being collected; resumed after step 1's checkpoint.
    cut = common + [f"runs_dir={tmp_path / 'cut'}", "settings.toy.interrupt_step=2"]
    run_id, store2, interrupted = interrupted_then_resumed(toy_recipe, tmp_path, cut)
    assert interrupted.in_flight_at_update[2]
    got = _history(store2, run_id)
    assert sorted(got[0]) == sorted(expected[0]) == [0, 1, 2, 3, 4, 5]
    assert any("rollouts_overlapped" in metrics for metrics, *_ in got[0].values())
    for step in expected[0]:
        for i, (a, b) in enumerate(zip(got[0][step], expected[0][step])):
            assert a == b, (step, i, a, b)
    assert got == expected


def test_the_plan_refuses_overlap_with_an_optimizer_that_cannot_wait(toy_site, toy_recipe, monkeypatch):
    make_dist(toy_site, "seal-oldopt", "0.1.0", {"oldopt": "oldopt_plugin"}, {"oldopt_plugin.py": (
        "from seal_platform.hookspecs import hookimpl\n\n"
        "@hookimpl\n"
        "def optimize(ctx, engine, trajectories, weights, step):\n"
        "    return {}\n")})
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    chosen = ["plugins.allow=[toy,oldopt]", "stages.optimize=oldopt"]
    plan_recipe(toy_recipe, chosen)  # synchronous: fine
    with pytest.raises(ConfigError) as info:
        plan_recipe(toy_recipe, chosen + ["rollout.overlap=true"])
    line = next(line for line in str(info.value).splitlines() if "rollout.overlap" in line)
    assert "'oldopt'" in line and "rollouts" in line


def test_a_background_collects_step_metrics_go_to_its_own_step(tmp_path):
    from seal_platform.config import RunConfig

    ctx = RunContext(config=RunConfig(name="t", environment="toy"), run_id="r", run_dir=tmp_path)
    ctx.add_step_metrics(judge_rate=0.5)  # the step under way (this thread)

    def collect():
        ctx.add_step_metrics(collect_rate=1.0)
        return rollouts.Collected([], infra.triage([]))

    prefetch = rollouts.Prefetch(1, collect, ctx)
    collected = prefetch.result()
    assert collected.overlapped and collected.metrics == {"collect_rate": 1.0}
    assert ctx.take_step_metrics() == {"judge_rate": 0.5}


def test_a_failed_prefetch_raises_in_the_step_that_takes_it_and_wait_does_not():
    started, release = threading.Event(), threading.Event()

    def collect():
        started.set()
        release.wait(5)
        raise RuntimeError("engine gone")

    prefetch = rollouts.Prefetch(3, collect)
    in_flight = rollouts.RolloutsInFlight(prefetch)
    started.wait(5)
    assert in_flight.pending
    release.set()
    in_flight.wait()  # the optimizer's wait returns: the error is the next step's
    assert not in_flight.pending
    with pytest.raises(RuntimeError, match="engine gone"):
        prefetch.result()
    assert not rollouts.NOTHING_IN_FLIGHT.pending
