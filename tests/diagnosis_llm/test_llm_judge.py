"""The LLM-judge diagnoser, driven by a scripted judge engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from seal_platform.config import RunConfig
from seal_platform.context import RunContext
from seal_platform.engine import RolloutEngine
from seal_platform.types import Generation, Message, SamplingParams, Trajectory, TurnVerdict
from seal_platform_plugins.diagnosis_llm import plugin
from seal_platform_plugins.diagnosis_llm.judge import (
    LABELS,
    DiagnosisLlmSettings,
    parse_judgement,
    render_transcript,
)


class ScriptedJudge:
    """Answers each judge prompt with the next scripted text; records the prompts."""

    name = "scripted-judge"

    def __init__(self, answers: list[str]):
        self.answers = list(answers)
        self.prompts: list[list[Message]] = []
        self.batches: list[int] = []
        self.sampling: list[SamplingParams] = []

    def generate(self, conversations: list[list[Message]], sampling: SamplingParams) -> list[Generation]:
        self.batches.append(len(conversations))
        self.sampling.append(sampling)
        out = []
        for conversation in conversations:
            self.prompts.append(conversation)
            text = self.answers[(len(self.prompts) - 1) % len(self.answers)]
            out.append(Generation(text=text, token_ids=[1], logprobs=[0.0]))
        return out

    def count_tokens(self, conversation: list[Message]) -> int:
        return sum(len(m.content) for m in conversation) // 4

    def close(self) -> None:
        pass


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict]] = []

    def __call__(self, kind: str, message: str, **data) -> None:
        self.seen.append((kind, message, data))

    def kinds(self) -> list[str]:
        return [k for k, _, _ in self.seen]


def trajectory(reward: float = 0.0, failing_turns: tuple[int, ...] = (1,), n_turns: int = 3, unreached: tuple[int, ...] = ()) -> Trajectory:
    messages = [Message(role="system", content="TOOLS...")]
    for turn in range(n_turns):
        messages += [
            Message(role="user", content=f"request {turn}"),
            Message(role="assistant", content=f'<tool_call>{{"name": "cd", "arguments": {{"folder": "f{turn}"}}}}</tool_call>', trainable=True),
            Message(role="tool", content=f"result {turn}"),
            Message(role="assistant", content=f"answer {turn}", trainable=True),
        ]
    verdicts = [
        TurnVerdict(turn=t, passed=t not in failing_turns, reached=t not in unreached,
                    checks={"gt_calls": [f"cd(folder='g{t}')"], "model_calls": [f"cd(folder='f{t}')"], "state_ok": t not in failing_turns})
        for t in range(n_turns)
    ]
    return Trajectory(task_id="multi_turn_base_0", category="multi_turn_base", group="0:x", messages=messages,
                      turn_verdicts=verdicts, reward=reward)


def make_ctx(tmp_path: Path, judge_engine: object | None, **settings) -> tuple[RunContext, Events]:
    ctx = RunContext(config=RunConfig(environment="bfcl"), run_id="r", run_dir=tmp_path)
    ctx.settings["diagnosis_llm"] = DiagnosisLlmSettings(**settings)
    if judge_engine is not None:
        ctx.shared["engine"] = judge_engine
    events = Events()
    ctx.event = events  # type: ignore[method-assign]
    return ctx, events


def test_scripted_judge_is_a_rollout_engine():
    assert isinstance(ScriptedJudge(["x"]), RolloutEngine)


def test_registration():
    assert plugin.register_settings() == {"diagnosis_llm": DiagnosisLlmSettings}
    [spec] = plugin.register_diagnosers()
    assert spec.name == "llm_judge" and set(spec.labels) == set(LABELS)


def test_labels_failing_turns_of_failing_trajectories_with_rationale(tmp_path):
    judge = ScriptedJudge(['{"label": "argument_mismatch", "rationale": "cd got f1, the request said g1."}'])
    ctx, events = make_ctx(tmp_path, judge)
    failing = trajectory(failing_turns=(1, 2))
    passing = trajectory(reward=1.0, failing_turns=())
    labels = plugin.diagnose(ctx=ctx, environment=None, trajectories=[failing, passing], step=3)
    assert [(lab.trajectory_id, lab.turn, lab.label) for lab in labels] == [
        (failing.id, 1, "argument_mismatch"), (failing.id, 2, "argument_mismatch"),
    ]
    assert all(lab.source == "llm_judge" and lab.reference_label == "state_mismatch" for lab in labels)
    assert labels[0].rationale == "cd got f1, the request said g1."
    # Both prompts went to the engine in one batch, greedy; the prompt shows the turn and the findings.
    assert judge.batches == [2] and judge.sampling[0].temperature == 0.0
    prompt = judge.prompts[0][1].content
    assert "=== turn 1 (THE TURN TO DIAGNOSE) ===" in prompt and "request 1" in prompt
    assert "request 2" not in prompt  # nothing after the judged turn
    assert "cd(folder='g1')" in prompt
    assert events.seen == []


def test_unreached_turns_and_successful_trajectories_are_not_judged(tmp_path):
    judge = ScriptedJudge(['{"label": "state_mismatch", "rationale": "r"}'])
    ctx, _ = make_ctx(tmp_path, judge)
    labels = plugin.diagnose(ctx=ctx, environment=None, trajectories=[trajectory(failing_turns=(1, 2), unreached=(2,))], step=0)
    assert [lab.turn for lab in labels] == [1]


def test_unusable_answers_are_skipped_with_an_event(tmp_path):
    answers = ["I think it was the arguments.", '{"label": "made_up_label", "rationale": "x"}',
               '```json\n{"label": "Recovery Failure", "rationale": "never retried"}\n```']
    judge = ScriptedJudge(answers)
    ctx, events = make_ctx(tmp_path, judge)
    labels = plugin.diagnose(ctx=ctx, environment=None, trajectories=[trajectory(failing_turns=(0, 1, 2))], step=0)
    assert [(lab.turn, lab.label) for lab in labels] == [(2, "recovery_failure")]
    assert "unparsed_judgement" not in {lab.label for lab in labels}
    assert events.kinds() == ["diagnosis_llm.unparsed"]
    assert [s["turn"] for s in events.seen[0][2]["skipped"]] == [0, 1]


def test_without_an_engine_nothing_is_labelled_and_an_event_says_why(tmp_path):
    ctx, events = make_ctx(tmp_path, None)
    assert plugin.diagnose(ctx=ctx, environment=None, trajectories=[trajectory()], step=0) == []
    assert events.kinds() == ["diagnosis_llm.no_engine"]
    ctx, events = make_ctx(tmp_path, ScriptedJudge(["{}"]), engine="none")
    assert plugin.diagnose(ctx=ctx, environment=None, trajectories=[trajectory()], step=0) == []
    assert events.seen == []


def test_per_step_cap_and_batching(tmp_path):
    judge = ScriptedJudge(['{"label": "missing_tool_call", "rationale": "r"}'])
    ctx, events = make_ctx(tmp_path, judge, max_turns_per_step=5, batch_size=2)
    trajectories = [trajectory(failing_turns=(0, 1, 2)) for _ in range(3)]
    labels = plugin.diagnose(ctx=ctx, environment=None, trajectories=trajectories, step=0)
    assert len(labels) == 5 and judge.batches == [2, 2, 1]
    assert events.kinds() == ["diagnosis_llm.capped"]


def test_a_failing_judge_engine_does_not_stop_the_run(tmp_path):
    class Broken(ScriptedJudge):
        def generate(self, conversations, sampling):
            raise RuntimeError("engine down")

    ctx, events = make_ctx(tmp_path, Broken([]))
    assert plugin.diagnose(ctx=ctx, environment=None, trajectories=[trajectory()], step=0) == []
    assert events.kinds() == ["diagnosis_llm.failed"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"label": "state_mismatch", "rationale": "wrong folder"}', ("state_mismatch", "wrong folder")),
        ('Sure! {"label": "spurious_tool_call", "rationale": "no call needed"} Hope this helps.', ("spurious_tool_call", "no call needed")),
        ('{"note": 1} then {"label": "invalid-tool-call"}', ("invalid_tool_call", "")),
        ('{"label": "pass", "rationale": "fine"}', None),  # not a failure label
        ('{"label": ["state_mismatch"]}', None),
        ("{'label': 'state_mismatch'}", None),  # not JSON; never evaluated as Python
        ('{"label": "state_mismatch", "rationale": ', None),
        ("", None),
    ],
)
def test_parse_judgement(text, expected):
    assert parse_judgement(text) == expected


def test_transcript_is_cut_oldest_first():
    messages = [Message(role="system", content="S")]
    for turn in range(20):
        messages += [Message(role="user", content=f"request {turn} " + "x" * 300), Message(role="assistant", content="ok")]
    text = render_transcript(messages, 19, max_chars=1000)
    assert text.startswith("...[earlier turns cut]") and "request 19" in text and "request 0 " not in text
    assert len(text) <= 1000 + len("...[earlier turns cut]\n")
