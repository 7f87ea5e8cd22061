"""Evaluation isolation: whatever revisions training produced, evaluation prompts, observations and verifier
inputs are byte-identical to those of revision 0, and the verifier never sees the interface.

A scripted engine plays the same moves whatever it is shown (its reply depends only on the task and on how
many assistant messages the conversation already holds) and records every conversation it receives. The
moves exercise everything a revision can change: a malformed call (parse error), an unknown tool, a real
tool call missing its required arguments (a tool error), a valid call, and plain answers, over every turn of
one evaluation task per category (miss_func reveal turns included).
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest

from seal_platform.capability import CapabilityState
from seal_platform.config import RunConfig
from seal_platform.context import RunContext
from seal_platform.stages import adopt_interface, collect_with, evaluate_with
from seal_platform.types import Generation, Interface, Message, SamplingParams, Task, Trajectory, TurnLabel
from seal_platform_libs.toolenv.evolution import EvolutionSettings
from seal_platform_libs.toolenv.interface import active_changes
from seal_platform_plugins.bfcl import data, plugin
from seal_platform_plugins.bfcl import verifier as verifier_module
from seal_platform_plugins.bfcl.environment import BfclEnvironment
from seal_platform_plugins.bfcl.settings import BfclSettings


class ScriptedEngine:
    """Plays a fixed script per task and records every conversation it is asked to continue."""

    name = "scripted"

    def __init__(self, scripts: dict[str, list[str]], first_user: dict[str, str]):
        self.scripts = scripts
        self.first_user = first_user  # first user message content -> task id
        self.prompts: dict[str, list[str]] = {}

    def _task_of(self, conversation: list[Message]) -> str:
        first = next(m.content for m in conversation if m.role == "user")
        return self.first_user[first]

    def generate(self, conversations: list[list[Message]], sampling: SamplingParams) -> list[Generation]:
        out = []
        for conversation in conversations:
            task_id = self._task_of(conversation)
            dump = json.dumps([m.model_dump(mode="json") for m in conversation], ensure_ascii=False)
            self.prompts.setdefault(task_id, []).append(dump)
            k = sum(1 for m in conversation if m.role == "assistant")
            script = self.scripts[task_id]
            text = script[k] if k < len(script) else "All done."
            out.append(Generation(text=text, token_ids=[1, 2, 3], logprobs=[-0.5, -0.5, -0.5]))
        return out

    def count_tokens(self, conversation: list[Message]) -> int:
        return sum(len(m.content) for m in conversation) // 4 + 4 * len(conversation)

    def close(self) -> None:
        pass


def _call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def _script(task: Task) -> list[str]:
    docs = data.tool_docs(task)
    needy = next(d for d in docs if d["parameters"].get("required"))
    free = next((d for d in docs if not d["parameters"].get("required")), None)
    moves = [
        "<tool_call>\n{\"name\": \"" + needy["name"] + "\", \"arguments\": {</tool_call>",  # parse error
        _call("teleport_user", {"where": "moon"}),  # unknown tool
        _call(needy["name"], {}),  # runs, raises: missing required arguments
    ]
    if free is not None:
        moves.append(_call(free["name"], {}))  # a call that runs
    moves.append("I have done what I could.")  # ends turn 0
    # Later turns: one failing call each, then an answer.
    for _ in range(len(task.payload["question"]) - 1):
        moves += [_call(needy["name"], {}), "Done with this request."]
    return moves


@pytest.fixture(scope="module")
def setup() -> Any:
    settings = BfclSettings(max_steps=40)
    env = BfclEnvironment(settings)
    # One task per category; the categories are variants of the same dialogues, so pick ones whose first
    # user message differs (that is how the scripted engine knows which task it is playing).
    tasks: list[Task] = []
    first_user: dict[str, str] = {}
    for category in settings.categories:
        for task in env.tasks("eval"):
            first = task.payload["question"][0]
            content = first[0]["content"] if first else ""
            if task.category == category and content and content not in first_user:
                first_user[content] = task.id
                tasks.append(task)
                break
    assert [t.category for t in tasks] == list(settings.categories)
    engine = ScriptedEngine({t.id: _script(t) for t in tasks}, first_user)
    config = RunConfig(environment="bfcl")
    ctx = RunContext(config=config, run_id="isolation", run_dir=Path("."), settings={"bfcl": settings})
    yield env, engine, tasks, ctx
    env.close()
    ctx.executor.close()


def _record_verifier(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    """Record every verifier input (task, calls) and verdict: the verifier is called with nothing else."""
    calls: list[tuple[str, str, str]] = []
    real = verifier_module.verify

    def spy(task: Task, model_turns: Any, executor: Any = None) -> Any:
        outcome = real(task, model_turns, executor=executor)
        turns = json.dumps([[repr(c) for c in turn] for turn in model_turns])
        calls.append((task.id, turns, json.dumps(outcome.to_json(), sort_keys=True, default=str)))
        return outcome

    monkeypatch.setattr(verifier_module, "verify", spy)
    return calls


def _evaluate(env: BfclEnvironment, engine: ScriptedEngine, tasks: list[Task], ctx: RunContext, step: int):
    engine.prompts = {}
    result = evaluate_with(plugin.evaluate, ctx=ctx, environment=env, engine=engine, tasks=tasks, step=step)
    return dict(engine.prompts), result


def _messages(trajectories: list[Trajectory]) -> dict[str, str]:
    return {
        t.task_id: json.dumps([m.model_dump(mode="json") for m in t.messages], ensure_ascii=False)
        for t in trajectories
    }


def _verdicts(trajectories: list[Trajectory]) -> dict[str, str]:
    return {
        t.task_id: json.dumps(
            {"reward": t.reward, "verdicts": [v.model_dump(mode="json") for v in t.turn_verdicts]}, sort_keys=True
        )
        for t in trajectories
    }


def _pressure_state(tasks: list[Task]) -> CapabilityState:
    """A state in which every change family fires in every category."""
    state = CapabilityState()
    trajs, labs = [], []
    for task in tasks:
        for j in range(4):
            t = Trajectory(id=f"{task.id}-{j}", task_id=task.id, category=task.category, group=task.id, reward=0.0)
            trajs.append(t)
            for turn, label in enumerate(
                ["argument_mismatch", "invalid_tool_call", "recovery_failure", "spurious_tool_call", "state_mismatch"]
            ):
                labs.append(TurnLabel(trajectory_id=t.id, turn=turn, label=label, source="test"))
    state.update(0, 0, trajs, labs)
    return state


def test_evaluation_is_byte_identical_whatever_training_evolved(setup: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    env, engine, tasks, ctx = setup
    ctx.settings["bfcl"] = ctx.settings["bfcl"].model_copy(
        update={"evolution": EvolutionSettings(mode="closed_loop", type_hints=True, hide_optional=True, min_count=2,
                                               min_evidence=2)}
    )
    verified = _record_verifier(monkeypatch)

    # Evaluation before any training.
    prompts0, result0 = _evaluate(env, engine, tasks, ctx, step=0)
    verify0 = sorted(verified)
    verified.clear()
    assert set(prompts0) == {t.id for t in tasks}
    assert all(len(p) >= 3 for p in prompts0.values())

    # Training evolves the interface through several revisions and plays under the last one.
    state = _pressure_state(tasks)
    revisions = [env.pristine_interface()]
    nothing = plugin.evolve_interface(
        ctx=ctx, environment=env, interface=revisions[-1], state=CapabilityState(), step=0
    )
    assert nothing is None  # closed loop: nothing without evidence
    new = plugin.evolve_interface(ctx=ctx, environment=env, interface=revisions[-1], state=state, step=1)
    assert new is not None
    new = adopt_interface(new, revisions[-1], 1, "bfcl")  # numbered by the core, as the loop does
    revisions.append(new)
    # A second revision on top: the recipe switches to pooled decisions ("*" scope) mid-run.
    ctx.settings["bfcl"] = ctx.settings["bfcl"].model_copy(
        update={"evolution": ctx.settings["bfcl"].evolution.model_copy(update={"per_category": False})}
    )
    newer = plugin.evolve_interface(ctx=ctx, environment=env, interface=revisions[-1], state=state, step=2)
    assert newer is not None
    newer = adopt_interface(newer, revisions[-1], 2, "bfcl")
    assert newer.parent == new.revision
    revisions.append(newer)
    latest = revisions[-1]
    for task in tasks:
        assert active_changes(latest, task.category) >= {"required_markers", "recovery", "no_invent_note"}

    engine.prompts = {}
    trained = collect_with(plugin.collect,
        ctx=ctx, environment=env, engine=engine, tasks=tasks, interface=latest, group_size=1, step=3
    )
    train_prompts = dict(engine.prompts)
    verify_train = sorted(verified)
    verified.clear()
    assert all(t.interface_revision == latest.revision for t in trained)
    # The revision really changed what training saw: the system prompt, and the hints after errors.
    for task in tasks:
        assert train_prompts[task.id][0] != prompts0[task.id][0]
    train_text = "".join(m.content for t in trained for m in t.messages)
    assert "[required]" in train_text and "Hint:" in train_text and "Guidelines" in train_text

    # Evaluation after training: byte for byte what it was.
    prompts1, result1 = _evaluate(env, engine, tasks, ctx, step=3)
    verify1 = sorted(verified)
    verified.clear()
    assert prompts1 == prompts0
    assert _messages(result1.trajectories) == _messages(result0.trajectories)
    assert _verdicts(result1.trajectories) == _verdicts(result0.trajectories)
    assert result1.per_category == result0.per_category
    assert verify1 == verify0
    eval_text = "".join(m.content for t in result1.trajectories for m in t.messages)
    assert "[required]" not in eval_text and "Hint:" not in eval_text and "Allowed values:" not in eval_text
    assert all(t.interface_revision == 0 for t in result1.trajectories)

    # The verifier never sees the interface: the same moves under revision 0 and under the latest
    # revision reach it as the same inputs and get the same verdicts.
    assert "interface" not in inspect.signature(verifier_module.verify).parameters
    engine.prompts = {}
    trained0 = collect_with(plugin.collect,
        ctx=ctx, environment=env, engine=engine, tasks=tasks, interface=Interface(), group_size=1, step=3
    )
    verify_train0 = sorted(verified)
    assert verify_train0 == verify_train
    assert _verdicts(trained0) == _verdicts(trained)


def test_the_diagnosers_labels_close_the_loop(setup: Any) -> None:
    """collect -> diagnose -> capability state -> evolve on the real episode and diagnoser: the scripted
    agent's unrecovered tool errors and invalid calls switch on recovery feedback and the no-invent note."""
    env, engine, tasks, ctx = setup
    ctx.settings["bfcl"] = ctx.settings["bfcl"].model_copy(
        update={"evolution": EvolutionSettings(mode="closed_loop", min_count=2, min_evidence=4)}
    )
    trajs = collect_with(
        plugin.collect,
        ctx=ctx,
        environment=env,
        engine=engine,
        tasks=tasks,
        interface=Interface(),
        group_size=2,
        step=0,
    )
    labels = plugin.diagnose(trajectories=trajs)
    seen = {lab.label for lab in labels}
    assert {"recovery_failure", "invalid_tool_call"} <= seen
    state = CapabilityState()
    state.update(0, 0, trajs, labels)
    rev = plugin.evolve_interface(ctx=ctx, environment=env, interface=Interface(), state=state, step=0)
    assert rev is not None
    rev = adopt_interface(rev, Interface(), 0, "bfcl")  # numbered by the core, as the loop does
    assert rev.revision == 1
    assert set(rev.driven_by) <= seen
    for task in tasks:
        assert {"recovery", "no_invent_note"} <= active_changes(rev, task.category)
    again = collect_with(
        plugin.collect, ctx=ctx, environment=env, engine=engine, tasks=tasks, interface=rev, group_size=1, step=1
    )
    tool_text = "".join(m.content for t in again for m in t.messages if m.role == "tool")
    assert "Hint: the call is missing a required argument" in tool_text
