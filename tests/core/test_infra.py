"""Infrastructure failures: never diagnosed, their groups masked out of the update, a metric, an event, and an
abort only above the threshold. Also the executor contract behind them and the scale-out recipe checks."""

from __future__ import annotations

import sys

import pytest

from seal_platform.cli import load_recipe
from seal_platform.executor import LocalExecutor
from seal_platform.infra import InfraAbort, InfraError, failed_trajectory, mean_reward, triage
from seal_platform.loop import Runner
from seal_platform.planning import check_recipe, prepare
from seal_platform.plugins import make_plugin_manager
from seal_platform.store import RunStore
from seal_platform.types import Task, Trajectory


def _runner(recipe, overrides=()):
    config, issues, path = load_recipe(str(recipe), list(overrides))
    assert not issues, issues
    host = make_plugin_manager(allow=config.plugins.allow, block=config.plugins.block, required=config.named_plugins())
    plan = prepare(config, host, str(path))
    store = RunStore(config.store_url())
    return Runner(plan, host, store, recipe=str(path)), store


def test_triage_masks_whole_groups():
    task = Task(id="t", category="c", split="train")
    ok = [Trajectory(task_id="t", category="c", group=g, sample=i) for g in ("a", "b") for i in range(2)]
    lost = failed_trajectory(task, "a", 2, "ActorDiedError: gone")
    result = triage([*ok, lost])
    assert lost.finish == "infra_failure" and lost.infra_failure == "ActorDiedError: gone"
    assert result.failed == [lost] and result.masked_groups == ["a"]
    assert result.usable == ok  # group-mates of a lost episode are still diagnosed
    assert [t.group for t in result.trainable] == ["b", "b"]
    assert result.masked_frac == pytest.approx(3 / 5)


def test_mean_reward_leaves_out_lost_episodes():
    task = Task(id="t", category="c", split="train")
    done = [Trajectory(task_id="t", category="c", group="a", sample=i, reward=r) for i, r in enumerate((1.0, 0.0))]
    lost = failed_trajectory(task, "a", 2, "episode past its time limit")
    assert mean_reward([*done, lost]) == pytest.approx(0.5)  # not 1/3: the lost episode has no verdict
    assert mean_reward([lost]) == 0.0 and mean_reward([]) == 0.0


def test_local_executor_turns_infra_errors_into_placeholders_and_raises_others():
    ex = LocalExecutor(2)
    try:
        def fn(x):
            if x == 1:
                raise InfraError("replica gone")
            return x * 10

        assert ex.map(fn, [0, 1, 2], on_infra_failure=lambda item, why: f"lost {item}: {why}") == [
            0, "lost 1: InfraError: replica gone", 20]
        with pytest.raises(InfraError):  # no stand-in given: the loss is not silently dropped
            ex.map(fn, [0, 1])

        def bad(x):
            raise ValueError("a bug, not the infrastructure")

        with pytest.raises(ValueError):
            ex.map(bad, [0], on_infra_failure=lambda item, why: None)
    finally:
        ex.close()


def test_lost_episodes_are_stored_but_not_diagnosed_or_trained(toy_site, toy_recipe):
    # 4 tasks x 2 samples; the first episode (group of task 0) is lost: 2 of 8 masked = 0.25 <= 0.25.
    runner, store = _runner(toy_recipe, ["training.steps=1", "settings.toy.infra_fail_first=1"])
    runner.run()
    plugin = sys.modules["toy_plugin"].plugin
    stored = store.trajectories(runner.run_id, step=0, phase="train")
    lost = [t for t in stored if t.infra_failure]
    assert len(stored) == 8 and len(lost) == 1 and "replica died" in lost[0].infra_failure
    assert lost[0].finish == "infra_failure"
    mates = {t.id for t in stored if t.group == lost[0].group}
    assert lost[0].id not in plugin.seen_trajectories["diagnose"] and len(plugin.seen_trajectories["diagnose"]) == 7
    assert not mates & set(plugin.seen_trajectories["optimize"]) and len(plugin.seen_trajectories["optimize"]) == 6
    assert not mates & set(plugin.seen_trajectories["reweight"])
    assert all(lab.trajectory_id != lost[0].id for lab in store.labels(runner.run_id, step=0))
    assert store.steps(runner.run_id)[0].metrics["infra_masked_frac"] == pytest.approx(0.25)
    ran = [t.reward for t in stored if not t.infra_failure]
    assert store.steps(runner.run_id)[0].mean_reward == pytest.approx(sum(ran) / len(ran))
    events = [e for e in store.events(runner.run_id) if e.kind == "infra_failure"]
    assert len(events) == 1 and "1 of 8" in events[0].message
    assert store.get_run(runner.run_id).status == "completed"


def test_step_aborts_above_the_threshold(toy_site, toy_recipe):
    runner, store = _runner(toy_recipe, ["training.steps=1", "settings.toy.infra_fail_first=3",
                                         "rollout.max_infra_failure_frac=0.25"])
    with pytest.raises(InfraAbort, match="max_infra_failure_frac"):
        runner.run()
    assert store.get_run(runner.run_id).status == "failed"
    assert any(e.kind == "infra_failure" for e in store.events(runner.run_id))


def test_scale_out_keys_are_checked(toy_site, toy_recipe):
    config, issues, _ = load_recipe(str(toy_recipe), ["rollout.executor=nowhere"])
    assert not issues
    host = make_plugin_manager(allow=config.plugins.allow)
    _, problems = check_recipe(config, host)
    where = {p.where: str(p) for p in problems}
    assert "no loaded plugin registers executor 'nowhere'" in where["rollout.executor"]
    config, issues, _ = load_recipe(str(toy_recipe), [])
    assert config.rollout.executor == "local" and not hasattr(config, "ray")


def test_keys_that_moved_to_plugin_settings_name_their_new_key(toy_site, toy_recipe):
    """Ray's and GRPO's keys left the core's schema; a recipe still using them gets one issue per key naming
    where it went, and nothing is validated as if they were not there."""
    old = ["ray.enabled=true", "ray.colocate=true", "rollout.replicas=2", "rollout.max_staleness=1",
           "rollout.stale_samples=importance_correct", "rollout.importance_cap=3"]
    config, issues, _ = load_recipe(str(toy_recipe), old)
    assert config is None
    moved = {i.where: i.what for i in issues}
    assert moved == {
        "ray.enabled": moved["ray.enabled"],
        "ray.colocate": moved["ray.colocate"],
        "rollout.replicas": moved["rollout.replicas"],
        "rollout.max_staleness": moved["rollout.max_staleness"],
        "rollout.stale_samples": moved["rollout.stale_samples"],
        "rollout.importance_cap": moved["rollout.importance_cap"],
    }
    assert "settings.ray.enabled" in moved["ray.enabled"]
    assert "settings.grpo.placement.colocate" in moved["ray.colocate"]
    assert "settings.grpo.replicas" in moved["rollout.replicas"]
    assert "settings.grpo.importance_cap" in moved["rollout.importance_cap"]
    assert all("Migrating recipes" in i.fix and "\n" not in str(i) for i in issues)
    # A ray: section with nothing but unknown keys is still named as moved.
    _, issues, _ = load_recipe(str(toy_recipe), ["ray.adress=auto"])
    assert [i.where for i in issues] == ["ray"] and "settings.ray" in issues[0].what


def test_a_registered_executor_runs_the_episodes(toy_site, toy_recipe):
    runner, store = _runner(toy_recipe, ["training.steps=1", "rollout.executor=toy-serial",
                                         "settings.toy.infra_fail_first=1"])
    executor = runner.ctx.executor
    assert type(executor).__name__ == "SerialExecutor"
    runner.run()
    assert executor.mapped == 8 and executor.closed  # the core closes what it built
    lost = [t for t in store.trajectories(runner.run_id, step=0) if t.infra_failure]
    assert [t.infra_failure for t in lost] == ["serial: toy engine replica died"]


def test_a_run_stored_before_the_keys_moved_gets_them_in_their_new_place():
    """Stored runs list every key of their day: resume and eval read them with what differs from a default moved
    to its new key (the defaults did not change), so they run as they ran."""
    from seal_platform.config import RunConfig, stored_config

    data = RunConfig(environment="toy").model_dump(mode="json")
    data["ray"] = {"enabled": True, "address": "auto", "namespace": "seal-platform", "colocate": False,
                   "placement_strategy": "SPREAD", "trainer_cpus": 1.0, "trainer_gpus": 0.0, "engine_cpus": 1.0,
                   "engine_gpus": 1.0, "episode_actors": 2, "episode_cpus": 0.25, "num_cpus": None}
    data["rollout"].update(replicas=3, max_staleness=0, stale_samples="importance_correct", importance_cap=2.0)
    config = stored_config(data)
    assert config.settings == {
        "ray": {"enabled": True, "address": "auto"},
        "grpo": {"replicas": 3, "stale_samples": "importance_correct",
                 "placement": {"strategy": "SPREAD", "engine_gpus": 1.0}},
    }
    fresh = RunConfig(environment="toy")
    assert stored_config(fresh.model_dump(mode="json")) == fresh


def test_the_cluster_a_recipe_enables_reaches_checks_executor_and_context(toy_site, toy_recipe):
    """A plugin registers a cluster (register_clusters) that its settings enable; the core names no backend: it
    refuses an executor whose cluster is off (with the cluster's own enable hint), passes the cluster to
    check_config and check_machine, and hands it to the run as ctx.cluster."""
    config, issues, _ = load_recipe(
        str(toy_recipe), ["rollout.executor=toy-clustered", "settings.toy.needs_cluster=true"]
    )
    assert not issues
    host = make_plugin_manager(allow=config.plugins.allow)
    _, problems = check_recipe(config, host)
    where = {p.where: p for p in problems}
    assert set(where) == {"rollout.executor", "settings.toy.needs_cluster"}
    assert "runs on the toy-cluster cluster" in where["rollout.executor"].what
    assert "set settings.toy.cluster: ADDRESS" in where["rollout.executor"].fix
    assert sys.modules["toy_plugin"].plugin.seen_clusters["check_config"] is None

    runner, store = _runner(toy_recipe, ["training.steps=1", "rollout.executor=toy-clustered",
                                         "settings.toy.needs_cluster=true", "settings.toy.cluster=head:1"])
    runner.run()
    plugin = sys.modules["toy_plugin"].plugin
    seen = plugin.seen_clusters
    assert seen["executor"] is runner.ctx.cluster and runner.ctx.cluster.name == "toy-cluster"
    assert runner.ctx.cluster.address == "head:1" and runner.ctx.cluster.leases == 1
    assert seen["check_machine"].address == "head:1" and seen["check_config"].address == "head:1"
    assert store.get_run(runner.run_id).status == "completed"
