"""The kvstore example plugin: episodes, verifier, diagnoser, interface evolution, verify_record, and a
whole run through the core with its scripted engine."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("seal_kvstore", reason="pip install -e examples/seal-kvstore")

from seal_kvstore import plugin  # noqa: E402
from seal_kvstore.env import KVEnvironment, KVSettings  # noqa: E402
from seal_kvstore.episode import parse_call  # noqa: E402
from seal_kvstore.evolution import EvolutionSettings, evolve  # noqa: E402
from seal_kvstore.oracle import OracleEngine  # noqa: E402

from seal_platform.capability import CapabilityState  # noqa: E402
from seal_platform.config import RunConfig  # noqa: E402
from seal_platform.conformance import check_environment  # noqa: E402
from seal_platform.context import RunContext  # noqa: E402
from seal_platform.stages import collect_with, evaluate_with  # noqa: E402
from seal_platform.types import Generation  # noqa: E402

RECIPE = Path(__file__).resolve().parents[1] / "recipe.yaml"


class Silent:
    name = "silent"

    def generate(self, conversations, sampling):
        return [Generation(text="Sure.", token_ids=[1], logprobs=[-0.1]) for _ in conversations]


def _ctx(tmp_path, **settings):
    return RunContext(config=RunConfig(environment="kvstore"), run_id="t", run_dir=tmp_path,
                      settings={"kvstore": KVSettings(**settings)})


def test_a_perfect_agent_passes_and_a_silent_one_is_labelled(tmp_path):
    ctx = _ctx(tmp_path)
    env = KVEnvironment(KVSettings())
    tasks = env.tasks("train")[:3]
    good = collect_with(plugin.collect, ctx=ctx, environment=env, engine=OracleEngine(skill=1.0), tasks=tasks,
                        interface=env.pristine_interface(), group_size=2, step=0)
    assert [t.reward for t in good] == [1.0] * 6 and good[0].group == good[1].group == f"0:{tasks[0].id}"
    assert {lab.label for lab in plugin.diagnose(trajectories=good)} == {"pass"}
    silent = collect_with(plugin.collect, ctx=ctx, environment=env, engine=Silent(), tasks=tasks,
                          interface=env.pristine_interface(), group_size=1, step=0)
    labels = plugin.diagnose(trajectories=silent)
    assert all(t.reward == 0.0 for t in silent)
    assert {lab.label for lab in labels} == {"empty_turn_model_response"}
    assert len(labels) == sum(len(t.turn_verdicts) for t in silent)


def test_malformed_calls_are_rejected_labelled_and_mapped_to_reference_labels(tmp_path):
    env = KVEnvironment(KVSettings(max_steps_per_turn=2))
    task = env.tasks("train")[0]
    trajectory = env.play(task, OracleEngine(skill=0.0), env.pristine_interface(), _sampling())
    assert trajectory.reward == 0.0 and trajectory.finish == "step_limit"
    assert all(c.rejected and "not valid JSON" in c.rejected for c in trajectory.tool_calls)
    labels = plugin.diagnose(trajectories=[trajectory])
    assert labels[0].label == "invalid_tool_call" and labels[0].reference_label == "empty_turn_model_response"
    assert labels[-1].label == "unreached_turn"


def test_parse_call_only_parses():
    assert parse_call("no call here") == (None, None)
    call, error = parse_call('<tool_call>{"name": "__import__(\'os\')", "arguments": {}}</tool_call>')
    assert call is None and "unknown tool" in error
    call, error = parse_call('<tool_call>{"name": "get", "arguments": {"key": "k"}}</tool_call>')
    assert error is None and call.name == "get" and call.arguments == {"key": "k"}


def test_evaluation_is_greedy_on_the_pristine_interface_and_scored_by_the_core(tmp_path):
    ctx = _ctx(tmp_path, n_eval=6)
    env = KVEnvironment(ctx.settings["kvstore"])
    result = evaluate_with(plugin.evaluate, ctx=ctx, environment=env, engine=OracleEngine(skill=1.0),
                           tasks=env.tasks("eval"), step=0)
    assert result.per_category == {"store": 100.0, "update": 100.0, "cleanup": 100.0} and result.n_tasks == 6
    assert {t.interface_revision for t in result.trajectories} == {0}


def test_the_interface_evolves_from_the_capability_state(tmp_path):
    env = KVEnvironment(KVSettings(max_steps_per_turn=1))
    trajectories = [env.play(t, OracleEngine(skill=0.0), env.pristine_interface(), _sampling(), group="g")
                    for t in env.tasks("train")[:6]]
    state = CapabilityState()
    state.update(0, 0, trajectories, plugin.diagnose(trajectories=trajectories))
    settings = EvolutionSettings(min_count=3)
    revision = evolve(env.pristine_interface(), state, settings, "base")
    assert revision is not None and revision.spec == {"changes": ["format_example"]}
    assert revision.driven_by == ["invalid_tool_call"] and "Example: <tool_call>" in revision.system_text
    assert evolve(revision, state, settings, "base") is None  # nothing new: no new revision
    assert evolve(env.pristine_interface(), CapabilityState(), settings, "base") is None


def test_verify_record():
    env = KVEnvironment(KVSettings())
    task = env.tasks("eval")[0]
    right = env.verify_record({"task_id": task.id, "turns": task.payload["ground_truth"]})
    assert right["success"] and [t["passed"] for t in right["turns"]] == [True] * len(task.payload["ground_truth"])
    wrong = env.verify_record(
        {"task_id": task.id, "turns": [[{"name": "put", "arguments": {"key": "x", "value": "y"}}]]}
    )
    assert not wrong["success"] and wrong["turns"][0]["checks"]["state_ok"] is False
    for bad in ({"task_id": "nope", "turns": []}, {"task_id": task.id, "turns": "x"},
                {"task_id": task.id, "turns": [[{"arguments": {}}]]}):
        with pytest.raises(ValueError):
            env.verify_record(bad)


def test_a_run_through_the_core(tmp_path):
    from seal_platform.loop import run_plan
    from seal_platform.planning import plan_recipe
    from seal_platform.store import RunStore

    plan = plan_recipe(RECIPE, [f"runs_dir={tmp_path}"])
    summary = run_plan(plan)
    assert summary.status == "completed" and summary.steps_done == 4 and summary.interface_revision >= 1
    store = RunStore(plan.config.store_url())
    revisions = store.interfaces(summary.run_id)
    assert revisions[-1].parent == revisions[-2].revision and "invalid_tool_call" in revisions[-1].driven_by
    assert set(summary.evaluations) == {0, 2, 4}


def _sampling():
    from seal_platform.types import SamplingParams

    return SamplingParams(temperature=1.0, max_new_tokens=32)


def test_the_plugin_passes_the_conformance_check():
    """The platform's conformance check for environment plugins (docs/write-an-environment-plugin.md, "Check
    your plugin"), as a plugin's own test suite calls it."""
    assert not [f for f in check_environment("kvstore", engine="kv-oracle") if f.failed]
