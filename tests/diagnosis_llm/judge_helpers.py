"""Helpers for the LLM-judge tests: a scripted judge model behind the rollout-engine interface,
trajectories with failing turns, heuristic labels for them, and a run context with a real run store."""

from __future__ import annotations

from pathlib import Path

from seal_platform.config import RunConfig
from seal_platform.context import RunContext
from seal_platform.types import Generation, Message, SamplingParams, Trajectory, TurnLabel, TurnVerdict
from seal_platform_plugins.diagnosis_llm.settings import DiagnosisLlmSettings


class ScriptedJudge:
    """A judge *model* (external to our code) that answers each prompt with the next scripted text, or with
    ``answer(prompt)`` when given a function; it records the prompts and sampling settings it got."""

    name = "scripted-judge"

    def __init__(self, answers):
        self.answers = answers
        self.prompts: list[list[Message]] = []
        self.batches: list[int] = []
        self.sampling: list[SamplingParams] = []

    def generate(self, conversations, sampling):
        self.batches.append(len(conversations))
        self.sampling.append(sampling)
        out = []
        for conversation in conversations:
            self.prompts.append(conversation)
            if callable(self.answers):
                text = self.answers(conversation)
            else:
                text = self.answers[(len(self.prompts) - 1) % len(self.answers)]
            out.append(Generation(text=text, token_ids=[1] * 10, logprobs=[0.0] * 10, prompt_tokens=100))
        return out

    def count_tokens(self, conversation):
        return sum(len(m.content) for m in conversation) // 4

    def close(self):
        pass


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict]] = []

    def __call__(self, kind: str, message: str, **data) -> None:
        self.seen.append((kind, message, data))

    def kinds(self) -> list[str]:
        return [k for k, _, _ in self.seen]

    def of(self, kind: str) -> list[dict]:
        return [d for k, _, d in self.seen if k == kind]


def trajectory(reward: float = 0.0, failing_turns=(1,), n_turns: int = 3, unreached=(), tag: str = "") -> Trajectory:
    messages = [Message(role="system", content="TOOLS...")]
    for turn in range(n_turns):
        messages += [
            Message(role="user", content=f"request {turn} {tag}"),
            Message(
                role="assistant",
                content=f'<tool_call>{{"name": "cd", "arguments": {{"folder": "f{turn}"}}}}</tool_call>',
                trainable=True,
            ),
            Message(role="tool", content=f"result {turn}"),
            Message(role="assistant", content=f"answer {turn}", trainable=True),
        ]
    verdicts = [
        TurnVerdict(
            turn=t,
            passed=t not in failing_turns,
            reached=t not in unreached,
            checks={
                "gt_calls": [f"cd(folder='g{t}')"],
                "model_calls": [f"cd(folder='f{t}')"],
                "state_ok": t not in failing_turns,
            },
        )
        for t in range(n_turns)
    ]
    return Trajectory(task_id="multi_turn_base_0", category="multi_turn_base", group="0:x", messages=messages,
                      turn_verdicts=verdicts, reward=reward)


def heuristic_labels(traj: Trajectory, failing: dict[int, tuple[str, str]]) -> list[TurnLabel]:
    """A heuristic diagnoser's labels: ``failing`` maps turn -> (label, reference); other turns pass."""
    return [
        TurnLabel(trajectory_id=traj.id, turn=v.turn, label=failing.get(v.turn, ("pass", "pass"))[0],
                  reference_label=failing.get(v.turn, ("pass", "pass"))[1], source="bfcl", rationale="rule fired")
        for v in traj.turn_verdicts
    ]


def make_ctx(tmp_path: Path, judge_engine=None, store=None, **settings) -> tuple[RunContext, Events]:
    # As the core makes it with `diagnosis.diagnosers: null`: the judge is among the enabled diagnosers.
    ctx = RunContext(config=RunConfig(environment="bfcl"), run_id="run-1", run_dir=tmp_path, store=store,
                     diagnosers=["bfcl", "llm_judge"])
    ctx.settings["diagnosis_llm"] = DiagnosisLlmSettings(**settings)
    if judge_engine is not None:
        ctx.shared["engine"] = judge_engine
    events = Events()
    ctx.event = events  # type: ignore[method-assign]
    return ctx, events
