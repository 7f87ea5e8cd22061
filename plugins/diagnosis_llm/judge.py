"""An LLM judge that labels the failing turns of failing trajectories from their transcripts.

The judge sees, for one failing ground-truth turn, the dialogue up to and including that turn (user
requests, the agent's messages, tool results) and the verifier's findings for the turn, and answers with a
JSON object ``{"label": ..., "rationale": ...}`` naming one label of the SEAL taxonomy. Its answer is model
output: it is only ever parsed as JSON (never evaluated), and an answer that is not such an object or names
no known label is skipped (with an event), never turned into a made-up label.

The judge model is reached through the rollout-engine interface like any policy, so any engine works: by
default the run's own (``ctx.shared["engine"]``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field

from seal_platform.types import Message, SamplingParams, Trajectory, TurnLabel, TurnVerdict

SOURCE = "llm_judge"

# The label set, with what each means to the judge. The reference taxonomy first (its A-Patch weights
# apply directly), then the finer labels of the paper's Table 5.
LABELS: dict[str, str] = {
    "spurious_tool_call": "the turn needed no tool call, but the agent called a tool",
    "empty_turn_model_response": "the turn needed tool calls, but the agent made none (it only talked)",
    "instance_mismatch": "the agent's calls crashed or used the wrong service/backend",
    "state_mismatch": "the agent's calls left the backend in a different state than required",
    "response_mismatch": "the agent did not retrieve the information the user asked for",
    "invalid_tool_call": "the agent wrote a malformed call or called a tool that does not exist",
    "argument_mismatch": "the agent called the right tool with wrong or missing argument values",
    "missing_tool_call": "the agent skipped a required step (a needed call was never made)",
    "recovery_failure": "a call returned an error and the agent did not fix it",
}
# Finer labels -> the reference label whose A-Patch base weight applies to them.
REFERENCE_OF: dict[str, str] = {
    "invalid_tool_call": "empty_turn_model_response",
    "argument_mismatch": "state_mismatch",
    "missing_tool_call": "state_mismatch",
    "recovery_failure": "state_mismatch",
}

SYSTEM_PROMPT = (
    "You diagnose why a tool-using AI agent failed one turn of a conversation. You get the conversation up to "
    "that turn and the verifier's findings. Choose exactly one label:\n{labels}\n\n"
    'Answer with one JSON object and nothing else: {{"label": "<one label>", "rationale": "<one or two '
    'sentences citing the transcript>"}}'
)


class DiagnosisLlmSettings(BaseModel):
    """Settings of the LLM-judge diagnoser (recipe section ``settings.diagnosis_llm``)."""

    model_config = ConfigDict(extra="forbid")

    engine: Literal["run", "none"] = Field(
        default="run", description="Judge model: `run` uses the run's rollout engine; `none` turns the judge off."
    )
    max_turns_per_step: int = Field(
        default=16, ge=0, description="Judge at most this many failing turns per step (0: no limit); judging costs generation time."
    )
    max_new_tokens: int = Field(default=256, ge=16)
    temperature: float = Field(default=0.0, ge=0.0)
    max_transcript_chars: int = Field(default=6000, ge=500, description="The transcript is cut (oldest first) to this.")
    batch_size: int = Field(default=16, ge=1, description="Judge prompts sent to the engine in one request.")


@dataclass
class Item:
    """One failing turn to judge."""

    trajectory: Trajectory
    verdict: TurnVerdict
    conversation: list[Message] = field(default_factory=list)


def turn_spans(messages: list[Message]) -> list[tuple[int, int]]:
    """(start, end) message indices of each user turn: a turn starts at a user message that does not follow
    another user message, and runs until the next such message."""
    starts = [i for i, m in enumerate(messages) if m.role == "user" and (i == 0 or messages[i - 1].role != "user")]
    return [(s, starts[k + 1] if k + 1 < len(starts) else len(messages)) for k, s in enumerate(starts)]


_ROLE = {"user": "USER", "assistant": "AGENT", "tool": "TOOL RESULT", "system": "SYSTEM"}


def render_transcript(messages: list[Message], turn: int, max_chars: int) -> str:
    """The dialogue up to the end of ``turn`` (system prompt left out), oldest part cut first."""
    spans = turn_spans(messages)
    if not spans:
        return ""
    end = spans[min(turn, len(spans) - 1)][1]
    lines = []
    for index, (start, stop) in enumerate(spans):
        if start >= end:
            break
        marker = " (THE TURN TO DIAGNOSE)" if index == turn else ""
        lines.append(f"=== turn {index}{marker} ===")
        for message in messages[start:min(stop, end)]:
            content = message.content.strip()
            if len(content) > 1500:
                content = content[:1500] + " ...[cut]"
            lines.append(f"{_ROLE.get(message.role, message.role.upper())}: {content}")
    text = "\n".join(lines)
    if len(text) > max_chars:
        text = "...[earlier turns cut]\n" + text[-max_chars:]
    return text


def _findings(verdict: TurnVerdict) -> str:
    checks = verdict.checks
    keep = ("gt_calls", "model_calls", "model_errors", "empty_gt", "instance_ok", "state_ok", "state_diff",
            "response_ok", "missing_results", "error_type")
    shown = {k: checks[k] for k in keep if k in checks}
    text = json.dumps(shown, ensure_ascii=False, default=str)
    return text[:3000]


def build_prompt(item: Item, settings: DiagnosisLlmSettings) -> list[Message]:
    """The judge's conversation for one failing turn."""
    labels = "\n".join(f"- {name}: {meaning}" for name, meaning in LABELS.items())
    transcript = render_transcript(item.trajectory.messages, item.verdict.turn, settings.max_transcript_chars)
    user = (
        f"Task category: {item.trajectory.category}\n\nTranscript:\n{transcript}\n\n"
        f"Verifier findings for turn {item.verdict.turn} (ground truth vs. agent):\n{_findings(item.verdict)}\n\n"
        "Which label explains the failure of this turn?"
    )
    return [Message(role="system", content=SYSTEM_PROMPT.format(labels=labels)), Message(role="user", content=user)]


def failing_items(trajectories: Iterable[Trajectory]) -> list[Item]:
    """The reached, failing turns of failing trajectories (the only ones the judge labels)."""
    out = []
    for trajectory in trajectories:
        if trajectory.success:
            continue
        for verdict in trajectory.turn_verdicts:
            if verdict.reached and not verdict.passed:
                out.append(Item(trajectory, verdict))
    return out


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def parse_judgement(text: str) -> tuple[str, str] | None:
    """(label, rationale) from the judge's answer, or None when it holds no usable judgement.

    Accepts the JSON object alone, inside a code fence, or surrounded by prose; the first object with a
    ``label`` field wins. Labels are matched case-insensitively with spaces or dashes for underscores.
    """
    if not isinstance(text, str):
        return None
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        for start in (i for i, ch in enumerate(candidate) if ch == "{"):
            try:
                value, _ = decoder.raw_decode(candidate, start)
            except ValueError:
                continue
            if not isinstance(value, dict) or "label" not in value:
                continue
            label = value.get("label")
            if not isinstance(label, str):
                return None
            label = re.sub(r"[\s\-]+", "_", label.strip().lower())
            if label not in LABELS:
                return None
            rationale = value.get("rationale", "")
            rationale = rationale if isinstance(rationale, str) else json.dumps(rationale, default=str)
            return label, rationale.strip()[:1000]
    return None


def judge(
    trajectories: list[Trajectory],
    engine: Any,
    settings: DiagnosisLlmSettings,
    event: Any = None,
) -> list[TurnLabel]:
    """Labels for the failing turns of the failing ``trajectories``, judged by ``engine``.

    ``event(kind, message, **data)`` (the run context's) records skipped turns: over the per-step cap, or
    answers that hold no usable judgement.
    """
    report = event or (lambda *a, **k: None)
    items = failing_items(trajectories)
    if settings.max_turns_per_step and len(items) > settings.max_turns_per_step:
        report(
            "diagnosis_llm.capped",
            f"judged {settings.max_turns_per_step} of {len(items)} failing turns (max_turns_per_step)",
            judged=settings.max_turns_per_step,
            failing=len(items),
        )
        items = items[: settings.max_turns_per_step]
    sampling = SamplingParams(temperature=settings.temperature, max_new_tokens=settings.max_new_tokens)
    labels: list[TurnLabel] = []
    skipped: list[dict[str, Any]] = []
    for offset in range(0, len(items), settings.batch_size):
        batch = items[offset : offset + settings.batch_size]
        generations = engine.generate([build_prompt(item, settings) for item in batch], sampling)
        for item, generation in zip(batch, generations):
            found = parse_judgement(generation.text)
            if found is None:
                skipped.append({"trajectory": item.trajectory.id, "turn": item.verdict.turn, "answer": generation.text[:200]})
                continue
            label, rationale = found
            labels.append(
                TurnLabel(
                    trajectory_id=item.trajectory.id,
                    turn=item.verdict.turn,
                    label=label,
                    source=SOURCE,
                    rationale=rationale,
                    reference_label=REFERENCE_OF.get(label, label),
                )
            )
    if skipped:
        report(
            "diagnosis_llm.unparsed",
            f"{len(skipped)} judge answer(s) held no JSON object with a known label; those turns are unlabelled",
            skipped=skipped[:20],
        )
    return labels
