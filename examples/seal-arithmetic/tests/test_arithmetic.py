"""The example environment with a scripted engine: rewards, labels, tool execution, safety."""

from __future__ import annotations

import pytest
from seal_arithmetic import plugin
from seal_arithmetic.env import ArithmeticSettings, calculate, parse_call

from seal_platform.config import RunConfig
from seal_platform.context import RunContext
from seal_platform.stages import collect_with, evaluate_with
from seal_platform.types import Generation


class ScriptedEngine:
    """Answers each question with the text ``reply(question)``."""

    name = "scripted"

    def __init__(self, reply):
        self.reply = reply
        self.calls = []

    def generate(self, conversations, sampling):
        self.calls.append(sampling)
        out = []
        for conv in conversations:
            text = self.reply(conv[-1].content)
            out.append(Generation(text=text, token_ids=[1] * 3, logprobs=[-0.1] * 3))
        return out


def _call(expr: str, name: str = "calculator") -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {{"expression": "{expr}"}}}}</tool_call>'


def _ctx(**arith) -> RunContext:
    return RunContext(config=RunConfig(environment="arithmetic"), run_id="t", run_dir=".",
                      settings={"arithmetic": ArithmeticSettings(**arith)})


def test_calculator_is_safe_and_correct():
    assert calculate("12 * (3 + 4) - -2") == 86
    for bad in ("__import__('os').system('x')", "a + 1", "2 ** 8", "[1]"):
        with pytest.raises(ValueError):
            calculate(bad)
    assert parse_call("no call")[0] is None
    assert "JSON" in parse_call("<tool_call>{oops</tool_call>")[1]


def test_collect_rewards_and_diagnose_labels():
    ctx = _ctx(n_train=6)
    env = plugin._env(ctx)
    tasks = env.tasks("train")[:3]  # add, sub, mul

    def reply(question: str) -> str:
        a, op, b = question.removeprefix("What is ").rstrip("?").split()
        if op == "+":
            return _call(f"{a} + {b}")  # right
        if op == "-":
            return _call(f"{a} + {b}")  # wrong expression
        return "The answer is 12."  # no call

    engine = ScriptedEngine(reply)
    trajs = collect_with(plugin.collect, ctx=ctx, environment=env, engine=engine, tasks=tasks,
                         interface=env.pristine_interface(), group_size=2, step=0)
    assert len(trajs) == 6 and [t.reward for t in trajs] == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert trajs[0].group == trajs[1].group != trajs[2].group
    assert trajs[0].messages[-1].role == "tool" and trajs[0].messages[-2].token_ids == [1, 1, 1]
    labels = plugin.diagnose(environment=env, trajectories=trajs)
    assert [lab.label for lab in labels[::2]] == ["pass", "argument_mismatch", "invalid_tool_call"]
    assert labels[4].reference_label == "empty_turn_model_response"
    # The core's rollout sampling, plus this environment's own stop string and token cap.
    assert engine.calls[0].temperature == 1.0 and engine.calls[0].stop == ["</tool_call>"]
    assert engine.calls[0].max_new_tokens == 48


def test_unknown_tool_and_evaluate_greedy_per_category():
    ctx = _ctx(n_eval=6)
    env = plugin._env(ctx)
    engine = ScriptedEngine(lambda q: _call("1", name="search"))
    result = evaluate_with(plugin.evaluate, ctx=ctx, environment=env, engine=engine, tasks=env.tasks("eval"), step=0)
    assert result.per_category == {"add": 0.0, "sub": 0.0, "mul": 0.0} and result.n_tasks == 6
    assert engine.calls[0].greedy
    label = env.diagnose(result.trajectories[0], "arithmetic")
    assert label.label == "unknown_tool"


def test_answer_turn_requires_the_number():
    ctx = _ctx(answer_turn=True)
    env = plugin._env(ctx)
    task = env.tasks("train")[0]
    answer = str(task.payload["answer"])
    expr = task.payload["question"].removeprefix("What is ").rstrip("?")
    replies = iter([_call(expr), f"The answer is {answer}.", _call(expr), "I do not know."])
    engine = ScriptedEngine(lambda q: next(replies))
    good = env.run_episodes(engine, [(task, "g", 0)], env.pristine_interface(), engine_sampling())
    bad = env.run_episodes(engine, [(task, "g", 1)], env.pristine_interface(), engine_sampling())
    assert good[0].reward == 1.0 and bad[0].reward == 0.0
    assert env.diagnose(bad[0], "a").label == "wrong_final_answer"
    assert [m.role for m in good[0].messages[-3:]] == ["assistant", "tool", "assistant"]


def engine_sampling():
    from seal_platform.types import SamplingParams

    return SamplingParams(temperature=1.0, max_new_tokens=8)


def test_plugin_registers_through_entry_point():
    from importlib import metadata

    names = {ep.name for ep in metadata.entry_points(group="seal_platform")}
    assert "arithmetic" in names
    assert plugin.register_environments()[0].name == "arithmetic"
