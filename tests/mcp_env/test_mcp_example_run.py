"""`recipes/mcp-example.yaml` end to end: the run loop against the real example server process, with the tiny
random policy on the hf engine (learning is not the point here; the slow test below runs the embedded model),
and with a scripted sampler that passes some episodes, so that the short run makes a real policy update."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("mcp")

from mcp_scripted_engine import ScriptedWithPolicyLogprobs

from seal_platform.hookspecs import hookimpl
from seal_platform.loop import Runner
from seal_platform.planning import load_recipe, plan_recipe, plugin_host_for, prepare
from seal_platform.plugins import make_plugin_manager
from seal_platform.registry import EngineSpec
from seal_platform.store import RunStore
from seal_platform.types import Message

SMALL = ["training.steps=1", "training.tasks_per_step=2", "training.group_size=2", "rollout.max_new_tokens=8",
         "evaluation.max_new_tokens=8", "evaluation.before_training=false", "settings.mcp.n_eval=2",
         "settings.grpo.train_layers=1", "settings.grpo.micro_batch_size=2", "rollout.engine=hf",
         "rollout.dynamic_sampling.enabled=false"]  # one collect round: the tests' time, and 4 trajectories


ROOT = Path(__file__).resolve().parents[2]


def _run(overrides: list[str]):
    plan = plan_recipe(ROOT / "recipes" / "mcp-example.yaml", overrides)
    store = RunStore(plan.config.store_url())
    runner = Runner(plan, plan.host, store, recipe=plan.source)
    runner.run()
    return runner.run_id, store


# The hf engine sampling from the tiny random policy for the whole run (~16 s of a worker): `make test-slow`
# runs it. What `make test` keeps: the same recipe against the same server with a scripted sampler (the two
# tests at the end), and hf sampling in whole runs (tests/grpo/test_overlap_grpo.py,
# tests/openenv_env/test_openenv_example_run.py).
@pytest.mark.slow
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


# The smallest run that still shows the claim: one step on the first two train tasks (single-turn, so one
# generation round of 8 episodes), one eval task, two trained layers. Each hf generation round of 8 episodes
# costs about 2 CPU-minutes on this 2-core machine (2 steps of 2-turn tasks + 4 eval tasks need 8+ rounds:
# an hour or more of wall time under a load of 10, where 2 CPU-minutes take 7); see docs/mcp.md.
EMBEDDED_SMALL = ["training.steps=1", "training.tasks_per_step=2", "training.group_size=4", "settings.mcp.n_train=2",
                  "settings.mcp.n_eval=1", "evaluation.before_training=false", "settings.grpo.train_layers=2",
                  "rollout.engine=hf", "rollout.dynamic_sampling.enabled=false"]


@pytest.mark.slow
def test_the_embedded_model_is_trained_on_the_example(tmp_path, monkeypatch):
    """The embedded SmolLM2-135M passes some episodes and fails others against the real server process:
    mixed groups give an update of the embedded model."""
    monkeypatch.chdir(ROOT)
    run_id, store = _run([*EMBEDDED_SMALL, f"runs_dir={tmp_path}"])
    assert store.get_run(run_id).status == "completed"
    steps = store.steps(run_id)
    trajs = [t for s in steps for t in store.trajectories(run_id, step=s.step, phase="train")]
    assert not any(t.infra_failure for t in trajs), [t.infra_failure for t in trajs if t.infra_failure]
    assert any(t.reward == 1.0 for t in trajs) and any(t.reward == 0.0 for t in trajs), [
        (t.messages[-1].content[:120] if t.messages else "", t.finish) for t in trajs]
    assert sum(s.metrics.get("updates", 0) for s in steps) >= 1


class ScriptedCalls(ScriptedWithPolicyLogprobs):
    """A rollout engine that answers each task's user turn with its ground-truth call or, on a seeded coin flip,
    the same call with another allowed value (a valid call the verifier fails), as tokens of the policy's
    tokenizer with the policy's own log-probs: the tiny random policy never writes a call, so its groups are
    all failures and GRPO has nothing to learn from; these groups are mixed, and the verifier is unchanged."""

    name = "scripted_calls"
    OTHER = {"location": {"warehouse": "store", "store": "backroom", "backroom": "warehouse"},
             "status": {"active": "discontinued", "discontinued": "backorder", "backorder": "active"}}

    def __init__(self, model, tokenizer, seed: int):
        super().__init__(model, tokenizer, seed, ROOT / "examples" / "mcp-inventory" / "tasks.jsonl")

    def _text(self, conv: list[Message]) -> str:
        call = self.truth.get(conv[-1].content) if conv[-1].role == "user" else None
        if call is None:
            return "Done."
        call = json.loads(json.dumps(call))
        keys = [k for k in self.OTHER if k in call["arguments"]]  # add_stock/remove_stock calls may have none
        if keys and self.rng.random() < 0.5:
            call["arguments"][keys[0]] = self.OTHER[keys[0]][call["arguments"][keys[0]]]
        return f"<tool_call>{json.dumps(call)}</tool_call>"


class ScriptedCallsPlugin:
    @hookimpl
    def register_rollout_engines(self) -> list:
        from seal_platform_libs.policy.engines import POLICY_KEY

        return [EngineSpec("scripted_calls", lambda ctx: ScriptedCalls(*ctx.shared[POLICY_KEY], seed=ctx.seed),
                           "test: ground-truth or altered calls of the mcp example's tasks")]


def _run_scripted(tmp_path, tiny_model_dir, overrides: list[str]):
    """The example recipe with the tiny policy and the scripted_calls engine, against the real server."""
    overrides = [
        *overrides,
        "evaluation.before_training=false",
        "settings.mcp.n_eval=2",
        "settings.grpo.train_layers=1",
        "settings.grpo.micro_batch_size=4",
        "settings.grpo.mini_batch_tasks=1",
        "rollout.engine=scripted_calls",
        f"runs_dir={tmp_path}",
        f"settings.policy.model={tiny_model_dir}",
    ]
    config, issues, path = load_recipe(ROOT / "recipes" / "mcp-example.yaml", overrides)
    assert config is not None, issues
    host = make_plugin_manager(allow=config.plugins.allow, block=config.plugins.block,
                               extra=[("scripted_calls", ScriptedCallsPlugin())])
    assert plugin_host_for(config).is_loaded("mcp")
    plan = prepare(config, host, str(path))
    store = RunStore(plan.config.store_url())
    runner = Runner(plan, plan.host, store, recipe=plan.source)
    runner.run()
    assert store.get_run(runner.run_id).status == "completed"
    return runner.run_id, store


# ~20 s: `make test` keeps the updates on the real server's groups (the dynamic-sampling test below); this one
# runs in `make test-slow`.
@pytest.mark.slow
def test_a_short_run_on_the_example_makes_a_policy_update(tmp_path, tiny_model_dir, monkeypatch):
    """The example's first train task (a set_status call), 8 samples: some pass the verifier against the real
    server and some fail it, so the group has an advantage and the grpo stage updates the tiny policy."""
    monkeypatch.chdir(ROOT)
    run_id, store = _run_scripted(tmp_path, tiny_model_dir, ["training.steps=1", "training.tasks_per_step=1",
                                                             "training.group_size=8", "settings.mcp.n_train=1"])
    (step,) = store.steps(run_id)
    trajs = store.trajectories(run_id, step=0, phase="train")
    assert len(trajs) == 8 and not any(t.infra_failure for t in trajs)
    assert {t.reward for t in trajs} == {0.0, 1.0}, [t.tool_calls[0].arguments for t in trajs]  # a mixed group
    labels = {row.label for row in store.labels(run_id, step=0)}
    assert labels == {"pass", "argument_mismatch"}
    assert step.metrics["updates"] >= 1 and step.metrics["trained_sequences"] == 8, step.metrics


def test_dynamic_sampling_trains_the_grpo_learner_on_the_kept_mixed_groups_only(tmp_path, tiny_model_dir, monkeypatch):
    """The fast counterpart of the slow embedded-model test in tests/grpo/test_dynamic_sampling_grpo.py: real
    rollouts against the real server with mixed and uniform groups (pairs of scripted samples), dynamic sampling
    on. The step keeps one mixed group, and the grpo learner trains on exactly its two sequences, not on the
    uniform groups nor on the surplus mixed ones."""
    monkeypatch.chdir(ROOT)
    run_id, store = _run_scripted(tmp_path, tiny_model_dir, [
        "training.steps=1", "training.tasks_per_step=1", "training.group_size=2", "settings.mcp.n_train=8",
        "rollout.dynamic_sampling.enabled=true", "rollout.dynamic_sampling.tasks_per_round=3",
        "rollout.dynamic_sampling.max_rounds=2"])
    (step,) = store.steps(run_id)
    m = step.metrics
    trajs = store.trajectories(run_id, step=0, phase="train")
    assert not any(t.infra_failure for t in trajs)
    groups = {t.group for t in trajs}
    mixed = {g for g in groups if len({t.reward for t in trajs if t.group == g}) > 1}
    # What makes this a test of the filter: the drawn groups include both kinds (seeded, so always the same).
    assert mixed and mixed != groups, {g: [t.reward for t in trajs if t.group == g] for g in groups}
    assert m["ds_groups_drawn"] == len(groups) and m["ds_groups_kept"] == 1, m
    assert m["updates"] >= 1 and m["trained_sequences"] == 2, m
    # Every rollout, kept or not, was labelled by the mcp diagnoser.
    assert {row.trajectory_id for row in store.labels(run_id, step=0)} == {t.id for t in trajs}


def test_a_server_that_dies_during_the_runs_evaluation_is_counted_and_the_run_completes(tmp_path, tiny_model_dir,
                                                                                         monkeypatch):
    """The whole loop (plugin evaluate, core check, store, event) with a real server that exits on remove_stock:
    the train task never calls it, the second eval task does. Before, the run failed at its evaluation."""
    monkeypatch.chdir(ROOT)
    dying = ("settings.mcp.servers=[{name: inventory, command: python, args: [examples/mcp-inventory/server.py], "
             "env: {INVENTORY_CRASH_ON: remove_stock}}]")
    run_id, store = _run_scripted(tmp_path, tiny_model_dir, ["training.steps=1", "training.tasks_per_step=1",
                                                             "training.group_size=2", "settings.mcp.n_train=1", dying])
    assert not any(t.infra_failure for t in store.trajectories(run_id, step=0, phase="train"))
    evals = store.trajectories(run_id, phase="eval")
    assert len(evals) == 2 and [t.task_id for t in evals if t.infra_failure] == ["eval-1"]
    rows = store.evaluations(run_id)
    assert rows and {r.n_tasks for r in rows} == {2} and {r.category for r in rows} == {"named"}  # eval-0 ran
    (event,) = [e for e in store.events(run_id) if e.kind == "infra_failure"]
    assert event.data["phase"] == "eval" and "1 of 2 episode(s) lost" in event.message
