"""Integration: one SEAL step on a local Ray (episodes in Ray actors, two hf engine replicas) during which one
episode actor and one engine replica are killed. The step completes, the lost episodes are infrastructure
failures (stored, masked, an event), and every surviving trajectory is exactly what the same step gives
without the kills (greedy decoding, one request per engine batch: deterministic)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

torch = pytest.importorskip("torch")
ray = pytest.importorskip("ray")
pytest.importorskip("bfcl_eval")

from seal_platform.cli import load_recipe, plugin_host_for  # noqa: E402
from seal_platform.loop import Progress, Runner  # noqa: E402
from seal_platform.planning import prepare  # noqa: E402
from seal_platform.store import RunStore  # noqa: E402

pytestmark = pytest.mark.slow


def _overrides(model_dir, runs_dir) -> list[str]:
    return [
        f"runs_dir={runs_dir}",
        f"settings.policy.model={model_dir}",
        "rollout.engine=hf",
        "settings.ray.enabled=true",
        "settings.ray.num_cpus=8",
        "settings.grpo.replicas=2",
        "rollout.executor=ray",
        "rollout.workers=4",
        "settings.ray.episode_actors=2",
        "rollout.temperature=0",
        "rollout.max_new_tokens=12",
        "rollout.max_infra_failure_frac=0.9",
        "training.steps=1",
        "training.tasks_per_step=4",
        "training.group_size=2",
        "evaluation.before_training=false",
        "evaluation.max_tasks=1",
        "settings.engine.hf.max_batch_size=1",
        "settings.bfcl.max_steps=3",
        "settings.grpo.kl_coef=0",
    ]


class Killer(Progress):
    """Once the training step's episodes are under way: SIGKILL one episode actor, kill one engine replica."""

    def __init__(self, runner_box: list) -> None:
        self.runner_box = runner_box
        self.in_collect = False
        self.thread: threading.Thread | None = None
        self.killed: dict = {}

    def stage(self, step, stage):
        self.in_collect = stage == "collect"

    def episodes(self, done, total):
        if self.in_collect and done == 0 and self.thread is None:
            self.thread = threading.Thread(target=self._kill, daemon=True)
            self.thread.start()

    def _kill(self):
        runner = self.runner_box[0]
        engine, executor = runner.ctx.shared["engine"], runner.ctx.executor
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and ray.get(engine.replicas[1].stats.remote())["requests"] < 1:
            time.sleep(0.05)
        pid = executor.actor_pids()[0]
        os.kill(pid, signal.SIGKILL)
        ray.kill(engine.replicas[1], no_restart=True)
        self.killed = {"episode_actor_pid": pid, "replica": 1}


def _run(model_dir, runs_dir, progress=None):
    config, issues, path = load_recipe("seal-embedded", _overrides(model_dir, runs_dir))
    assert not issues, issues
    host = plugin_host_for(config)
    plan = prepare(config, host, str(path))
    store = RunStore(config.store_url())
    box: list = []
    if progress is not None:
        progress.runner_box = box
    runner = Runner(plan, host, store, recipe=str(path), progress=progress)
    box.append(runner)
    runner.run()
    return runner, store


def _key(t):
    return (t.task_id, t.sample)


def test_killing_an_episode_actor_and_a_replica_mid_step(tiny_model_dir, tmp_path):
    started = time.perf_counter()
    base_runner, base_store = _run(tiny_model_dir, tmp_path / "base")
    baseline = {_key(t): t for t in base_store.trajectories(base_runner.run_id, step=0, phase="train")}
    assert len(baseline) == 8 and not any(t.infra_failure for t in baseline.values())

    killer = Killer([])
    runner, store = _run(tiny_model_dir, tmp_path / "killed", progress=killer)
    assert killer.killed, "the kill thread did not run"
    assert store.get_run(runner.run_id).status == "completed"
    trajs = store.trajectories(runner.run_id, step=0, phase="train")
    lost = [t for t in trajs if t.infra_failure]
    survivors = [t for t in trajs if not t.infra_failure]
    assert len(trajs) == 8 and 1 <= len(lost) <= 4, [t.infra_failure for t in trajs]
    assert all(t.finish == "infra_failure" and ("Actor" in t.infra_failure or "Worker" in t.infra_failure)
               for t in lost), [t.infra_failure for t in lost]
    for t in survivors:  # verdicts (and the episodes behind them) unchanged by the kills
        ref = baseline[_key(t)]
        assert t.reward == ref.reward
        assert [v.model_dump() for v in t.turn_verdicts] == [v.model_dump() for v in ref.turn_verdicts]
        assert [m.content for m in t.messages] == [m.content for m in ref.messages]
    kinds = [e.kind for e in store.events(runner.run_id)]
    assert "infra_failure" in kinds and "engine_replica_lost" in kinds
    masked = store.steps(runner.run_id)[0].metrics["infra_masked_frac"]
    assert masked == pytest.approx(2 * len({t.group for t in lost}) / 8)
    labelled = {lab.trajectory_id for lab in store.labels(runner.run_id, step=0)}
    assert labelled and not labelled & {t.id for t in lost}
    print(f"\nintegration step with kills: {time.perf_counter() - started:.1f} s (both runs)")
