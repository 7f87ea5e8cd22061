"""benchmarks/trl_side_by_side/scoring.py: the other trainer's reward is this project's smarthome verifier,
and re-scoring stored episodes from their task id and completion alone agrees with the rewards stored."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from pathlib import Path

import pytest

from seal_platform.store import pack_trajectory, unpack_trajectory
from seal_platform.types import Interface, SamplingParams

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def scoring():
    spec = importlib.util.spec_from_file_location(
        "trl_side_by_side_scoring", ROOT / "benchmarks/trl_side_by_side/scoring.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def setup(scoring):
    return scoring.load_setup("smarthome-embedded")


def _call(call: dict) -> str:
    return f"<tool_call>{json.dumps(call)}</tool_call>"


def _wrong_value(task, call: dict) -> dict:
    """The call with one enumerated argument changed to another allowed value such that the home ends in
    another state than the ground truth's (a changed value can leave it as it is: the room was so already)."""
    from seal_platform_plugins.smarthome.tools import TOOL_DOCS, run_calls

    props = next(t for t in TOOL_DOCS if t["name"] == call["name"])["parameters"]["properties"]
    start = task.payload["initial_state"]
    for key in (k for k in call["arguments"] if "enum" in props[k]):
        for value in props[key]["enum"]:
            wrong = {"name": call["name"], "arguments": {**call["arguments"], key: value}}
            if run_calls(start, [wrong]) != run_calls(start, [call]):
                return wrong
    raise AssertionError(f"no wrong value for {call}")


def test_the_default_runs_split_and_single_generation_episodes(setup):
    assert len(setup.train_ids) == 256 and len(setup.eval_ids) == 64
    assert not set(setup.train_ids) & set(setup.eval_ids)
    assert all(len(setup.tasks[i].payload["turns"]) == 1 for i in setup.eval_ids)


def test_reward_is_the_verifiers_on_every_held_out_task(scoring, setup):
    right, wrong = [], []
    for task_id in setup.eval_ids:
        (call,) = setup.tasks[task_id].payload["turns"][0]["calls"]
        right.append((task_id, _call(call)))
        wrong.append((task_id, _call(_wrong_value(setup.tasks[task_id], call))))
    assert scoring.score_many(setup, right) == [1.0] * 64
    assert scoring.score_many(setup, wrong) == [0.0] * 64
    task_id, text = right[0]
    # Text after the first </tool_call> is cut, as the project's engines stop there; no call or bad JSON fails.
    assert scoring.score(setup, task_id, text + "<|im_end|> more " + wrong[0][1]) == 1.0
    assert scoring.score(setup, task_id, wrong[0][1] + text) == 0.0
    assert scoring.score(setup, task_id, "I cannot do that.") == 0.0
    assert scoring.score(setup, task_id, '<tool_call>{"name": "set_light", </tool_call>') == 0.0


def test_stored_episodes_rescored_from_task_and_completion_agree(scoring, setup):
    from seal_platform_plugins.smarthome.episode import run_episodes

    tasks = [setup.tasks[i] for i in setup.eval_ids[:24]]
    texts = []
    for k, task in enumerate(tasks):
        (call,) = task.payload["turns"][0]["calls"]
        texts.append([_call(call), _call(_wrong_value(task, call)), "No tool needed.", "<tool_call>{oops"][k % 4])
    s = setup.settings
    episodes = [(task, f"eval-{task.id}", 0) for task in tasks]
    played = run_episodes(scoring._Replay(texts), episodes, Interface(revision=0), SamplingParams(), 1,
                          s.worked_examples, s.example_results)
    stored = [unpack_trajectory(pack_trajectory(t)) for t in played]  # as the run store keeps them
    assert {t.reward for t in stored} == {0.0, 1.0}
    result = scoring.rescore(setup, stored)
    assert (result.checked, result.agreed, result.passed, result.skipped) == (24, 24, 6, 0)
    assert "24 of 24" in result.line()
    # A stored reward that the verifier does not give is found.
    stored[0] = stored[0].model_copy(update={"reward": 0.0})
    assert scoring.rescore(setup, stored).disagreements == [f"{stored[0].id}: stored 0.0, re-scored 1.0"]


def test_serve_answers_each_line_and_survives_a_bad_one(scoring, setup):
    task_id = setup.eval_ids[0]
    (call,) = setup.tasks[task_id].payload["turns"][0]["calls"]
    lines = [json.dumps({"pairs": [[task_id, _call(call)], [task_id, "nothing"]]}),
             json.dumps({"pairs": [["no-such-task", "x"]]}),
             json.dumps({"prompts": "eval"})]
    out = io.StringIO()
    scoring.serve(setup, io.StringIO("\n".join(lines) + "\n"), out)
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert replies[0] == {"rewards": [1.0, 0.0]}
    assert "no-such-task" in replies[1]["error"]
    assert [t for t, _ in replies[2]["tasks"]] == setup.eval_ids
