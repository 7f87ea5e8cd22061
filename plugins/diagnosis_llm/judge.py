"""An LLM judge that labels failing turns from their transcripts, alone or refining a heuristic diagnoser.

For each turn to judge, the judge sees the dialogue up to and including that turn (user requests, the
agent's messages, tool results), the verifier's findings for the turn and, in ``refine`` mode, the heuristic
label, and answers with ``{"label", "rationale", "confidence"}`` (:class:`.schema.Judgement`), the label
chosen from the labels offered for that turn:

* ``judge`` mode: every failing, reached turn of a failing trajectory; every label of the taxonomy.
* ``refine`` mode: only turns the heuristic diagnoser marks as failed; its label and the finer labels that
  refine it (the paper's Table 5), so a coarse ``state_mismatch`` may become ``argument_mismatch``.

Both labels are recorded: the heuristic's under its own source, the judge's under ``llm_judge``. An answer
that does not validate is asked again once (with the reason); if it still does not, or the request failed,
or the token budget is spent, the turn gets the heuristic label under ``llm_judge`` with no confidence, and
an event records the fallback with the raw answers. Valid and invalid answers are kept in the run store's
cache, keyed by the judge, the prompt and the labels offered, so no turn is judged twice, across resume too.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from seal_platform import labels as core_labels
from seal_platform.types import Message, Trajectory, TurnLabel, TurnVerdict

from . import metrics as shown
from .backends import Query, Reply, token_count
from .schema import CUT_OFF, Judgement, answer_schema, read_judgement
from .settings import DiagnosisLlmSettings

log = logging.getLogger(__name__)

SOURCE = "llm_judge"
CACHE_NAMESPACE = "diagnosis_llm.judgements"
USAGE_NAMESPACE = "diagnosis_llm.usage"
# Part of every cache key: bump it when the prompt or the answer format changes meaning.
PROMPT_VERSION = 2
MAX_RAW_CHARS = 2000  # of a raw answer kept in an event


def heuristic_source(config: Any, settings: Any) -> str | None:
    """The diagnoser whose labels the judge refines and falls back to."""
    if settings.heuristic:
        return settings.heuristic
    primary = config.diagnosis.primary
    if primary and primary != SOURCE:
        return primary
    return config.environment

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
# Finer labels -> the reference label whose A-Patch base weight applies to them when judged alone.
REFERENCE_OF: dict[str, str] = {
    "invalid_tool_call": "empty_turn_model_response",
    "argument_mismatch": "state_mismatch",
    "missing_tool_call": "state_mismatch",
    "recovery_failure": "state_mismatch",
}
# Finer labels -> the coarse labels each may replace in refine mode (the paper's Table 5): the core's.
REFINES = core_labels.REFINES

SYSTEM_PROMPT = (
    "You diagnose why a tool-using AI agent failed one turn of a conversation. You get the conversation up to "
    "that turn and the verifier's findings. Choose exactly one label:\n{labels}\n\n"
    'Answer with one JSON object and nothing else: {{"label": "<one label>", "rationale": "<one or two '
    'sentences citing the transcript>", "confidence": <a number from 0 to 1: how sure you are>}}'
)

Event = Callable[..., None]


@dataclass
class Item:
    """One turn to judge, the labels offered for it and the heuristic's label (fallback), if any."""

    trajectory: Trajectory
    verdict: TurnVerdict
    labels: tuple[str, ...] = tuple(LABELS)
    heuristic: TurnLabel | None = None
    conversation: list[Message] = field(default_factory=list)


# --- transcripts and prompts -----------------------------------------------------------------------------


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
    """The judge's conversation for one turn."""
    labels = "\n".join(f"- {name}: {LABELS.get(name, 'a label of the heuristic diagnoser')}" for name in item.labels)
    transcript = render_transcript(item.trajectory.messages, item.verdict.turn, settings.max_transcript_chars)
    heuristic = ""
    if settings.mode == "refine" and item.heuristic is not None:
        heuristic = (
            f"A rule-based diagnoser labelled this turn {item.heuristic.label!r} ({item.heuristic.rationale[:300]}). "
            "Keep that label or choose a finer one that explains the failure better.\n\n"
        )
    user = (
        f"Task category: {item.trajectory.category}\n\nTranscript:\n{transcript}\n\n"
        f"Verifier findings for turn {item.verdict.turn} (ground truth vs. agent):\n{_findings(item.verdict)}\n\n"
        f"{heuristic}Which label explains the failure of this turn?"
    )
    return [Message(role="system", content=SYSTEM_PROMPT.format(labels=labels)), Message(role="user", content=user)]


def retry_prompt(messages: list[Message], answer: str, reason: str) -> list[Message]:
    """The conversation asked again after an invalid answer: the answer, why it is invalid, and the rule."""
    return [
        *messages,
        Message(role="assistant", content=answer[:MAX_RAW_CHARS]),
        Message(role="user", content=f"That answer is not valid ({reason[:300]}). Answer again with only the JSON "
                "object, using exactly one of the labels listed, a short rationale and a confidence from 0 to 1."),
    ]


# --- which turns, with which labels ----------------------------------------------------------------------


def offered_labels(heuristic: TurnLabel) -> tuple[str, ...]:
    """Refine mode: the heuristic's label, its reference label and the finer labels that refine it."""
    coarse = heuristic.reference_label or heuristic.label
    if heuristic.label not in LABELS and coarse not in LABELS:
        return tuple(LABELS)  # a heuristic with a taxonomy of its own: offer ours
    names = [heuristic.label] if heuristic.label not in LABELS else []
    names += [name for name in LABELS if name in (heuristic.label, coarse) or coarse in REFINES.get(name, ())]
    return tuple(names)


def _verdict(trajectory: Trajectory, turn: int) -> TurnVerdict:
    for verdict in trajectory.turn_verdicts:
        if verdict.turn == turn:
            return verdict
    return TurnVerdict(turn=turn, passed=False)


def select_items(
    trajectories: Iterable[Trajectory], heuristic_labels: Iterable[TurnLabel], settings: DiagnosisLlmSettings
) -> tuple[list[Item], int]:
    """The turns to judge, and how many trajectories refine mode judged without heuristic labels."""
    by_turn: dict[tuple[str, int], TurnLabel] = {(lab.trajectory_id, lab.turn): lab for lab in heuristic_labels}
    labelled = {trajectory_id for trajectory_id, _ in by_turn}
    skip = set(settings.skip_labels)
    items: list[Item] = []
    unlabelled = 0
    for trajectory in trajectories:
        if settings.mode == "refine" and trajectory.id in labelled:
            for verdict_turn in sorted(t for tid, t in by_turn if tid == trajectory.id):
                labelled_turn = by_turn[(trajectory.id, verdict_turn)]
                if labelled_turn.label in skip or labelled_turn.label in settings.pass_labels:
                    continue
                items.append(Item(trajectory, _verdict(trajectory, verdict_turn), offered_labels(labelled_turn),
                                  labelled_turn))
            continue
        if trajectory.success:
            continue
        unlabelled += settings.mode == "refine"
        for verdict in trajectory.turn_verdicts:
            heuristic = by_turn.get((trajectory.id, verdict.turn))
            if verdict.reached and not verdict.passed and not (heuristic and heuristic.label in skip):
                items.append(Item(trajectory, verdict, tuple(LABELS), heuristic))
    return items, unlabelled


# --- the judge -------------------------------------------------------------------------------------------


def cache_key(identity: str, messages: list[Message], labels: tuple[str, ...], settings: DiagnosisLlmSettings) -> str:
    content = {
        "version": PROMPT_VERSION, "judge": identity, "labels": list(labels),
        "messages": [m.chat() for m in messages],
        "temperature": settings.temperature, "max_new_tokens": settings.max_new_tokens,
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


@dataclass
class Outcome:
    """What became of one item."""

    item: Item
    key: str
    messages: list[Message]
    judgement: Judgement | None = None
    status: str = "pending"  # judged | cached | fallback
    reason: str = ""
    answers: list[str] = field(default_factory=list)
    retries: list[str] = field(default_factory=list)
    cacheable: bool = False


class TokenBudget:
    """The judge's tokens over the run (prompt + completion), kept in the store's cache across resume."""

    def __init__(self, store: Any, run_id: str, limit: int):
        self.store, self.run_id, self.limit = store, run_id, limit
        saved = store.cache_get(USAGE_NAMESPACE, [run_id]).get(run_id) if store is not None else None
        self.spent = token_count(saved.get("tokens")) if isinstance(saved, dict) else 0  # a damaged entry: 0

    def reserve(self, estimate: int) -> bool:
        """Count ``estimate`` tokens as spent if they fit the budget (settled when the reply comes)."""
        if self.limit and self.spent + estimate > self.limit:
            return False
        self.spent += estimate
        return True

    def settle(self, estimate: int, actual: int) -> None:
        """Replace a reservation by what the reply says it used (the estimate stays when it says nothing)."""
        if actual > 0:
            self.spent += actual - estimate

    def save(self) -> None:
        if self.store is not None:
            self.store.cache_put(USAGE_NAMESPACE, self.run_id, {"tokens": self.spent}, run_id=self.run_id)


class Judge:
    """Judges one step's turns with ``backend`` (see :mod:`.backends`), caching in ``store``."""

    def __init__(self, backend: Any, settings: DiagnosisLlmSettings, store: Any = None, run_id: str = "",
                 event: Event | None = None):
        self.backend = backend
        self.settings = settings
        self.store = store if settings.cache else None
        self.run_id = run_id
        self.event: Event = event or (lambda *a, **k: None)
        self.budget = TokenBudget(store, run_id, settings.max_tokens_per_run)
        self.counts: dict[str, int] = {}  # the last label() call's outcomes (see step_metrics)

    def label(self, trajectories: list[Trajectory], heuristic_labels: list[TurnLabel], step: int) -> list[TurnLabel]:
        """The judge's labels for this step's turns (fallbacks included)."""
        items, unlabelled = select_items(trajectories, heuristic_labels, self.settings)
        if unlabelled:
            self.event(
                "diagnosis_llm.no_heuristic",
                f"{unlabelled} failing trajectory(ies) had no heuristic labels to refine: judged with every label",
                step=step,
                trajectories=unlabelled,
            )
        cap = self.settings.max_turns_per_step
        if cap and len(items) > cap:
            self.event("diagnosis_llm.capped", f"judged {cap} of {len(items)} turns (max_turns_per_step)",
                       step=step, judged=cap, failing=len(items))
            items = items[:cap]
        outcomes = [self._outcome(item) for item in items]
        self._from_cache(outcomes)
        asked: dict[str, Outcome] = {}  # identical turns (same prompt) of this step are asked once
        for outcome in outcomes:
            if outcome.status == "pending":
                asked.setdefault(outcome.key, outcome)
        retry = self._ask(list(asked.values()), first_round=True)
        self._ask(retry, first_round=False)
        for outcome in outcomes:
            first = asked.get(outcome.key)
            if outcome.status == "pending" and first is not None and first is not outcome:
                outcome.judgement, outcome.reason, outcome.answers = first.judgement, first.reason, list(first.answers)
                outcome.status = "cached" if first.judgement is not None else "fallback"
        self._remember(outcomes)
        self._report(outcomes, step)
        return [label for o in outcomes if (label := self._turn_label(o)) is not None]

    # --- steps of label() ------------------------------------------------------------------------------

    def _outcome(self, item: Item) -> Outcome:
        messages = build_prompt(item, self.settings)
        return Outcome(item, cache_key(self.backend.identity, messages, item.labels, self.settings), messages)

    def _from_cache(self, outcomes: list[Outcome]) -> None:
        if self.store is None or not outcomes:
            return
        found = self.store.cache_get(CACHE_NAMESPACE, [o.key for o in outcomes])
        for outcome in outcomes:
            value = found.get(outcome.key)
            if not isinstance(value, dict) or not isinstance(value.get("answers", []), list):
                continue  # not what _remember writes: a miss
            outcome.answers = [str(a) for a in value.get("answers", [])[:2]]
            if value.get("status") == "judged":
                judgement, reason = read_judgement(json.dumps(value.get("judgement")), outcome.item.labels)
                if judgement is not None:
                    outcome.judgement, outcome.status = judgement, "cached"
                    continue
            if value.get("status") == "invalid":
                outcome.status, outcome.reason = "fallback", f"cached invalid answer: {value.get('reason', '')}"

    def _ask(self, outcomes: list[Outcome], first_round: bool) -> list[Outcome]:
        """Ask the backend for ``outcomes`` (within the budget); returns those to ask again."""
        queries, asked = [], []
        for outcome in outcomes:
            messages = (
                outcome.messages if first_round else retry_prompt(outcome.messages, outcome.answers[-1], outcome.reason)
            )
            estimate = sum(len(m.content) for m in messages) // 3 + self.settings.max_new_tokens
            if not self.budget.reserve(estimate):  # reserved now, settled below: a batch cannot overshoot
                outcome.status = "fallback"
                outcome.reason = f"the judge's token budget is spent ({self.budget.spent} of {self.budget.limit})"
                continue
            queries.append(Query(messages, answer_schema(outcome.item.labels)))
            asked.append((outcome, estimate))
        if not queries:
            return []
        replies: list[Reply] = self.backend.ask(queries)
        again = []
        for (outcome, estimate), reply in zip(asked, replies):
            self.budget.settle(estimate, reply.tokens)
            outcome.retries += reply.retries
            if reply.text is None:
                outcome.status, outcome.reason = "fallback", f"the judge request failed: {reply.error}"
                continue
            outcome.answers.append(reply.text[:MAX_RAW_CHARS])
            judgement, reason = read_judgement(reply.text, outcome.item.labels)
            if judgement is not None:
                outcome.judgement, outcome.status, outcome.cacheable = judgement, "judged", True
            elif first_round:
                outcome.reason = reason
                again.append(outcome)
            else:
                outcome.status, outcome.reason, outcome.cacheable = "fallback", f"invalid answer twice: {reason}", True
        self.budget.save()
        return again

    def _remember(self, outcomes: list[Outcome]) -> None:
        if self.store is None:
            return
        for o in outcomes:
            if not o.cacheable:
                continue
            if o.status == "judged" and o.judgement is not None:
                value = {"status": "judged", "judgement": o.judgement.model_dump(), "answers": o.answers[-1:]}
            else:
                value = {"status": "invalid", "reason": o.reason, "answers": o.answers}
            try:
                self.store.cache_put(CACHE_NAMESPACE, o.key, value, run_id=self.run_id)
            except Exception as exc:  # a cache that cannot be written costs a re-judgement later, nothing more
                log.warning("could not cache a judgement: %s", exc)

    def step_metrics(self) -> dict[str, float]:
        """The last step's judge metrics, stored with the step's metrics: ``judge_turns`` (turns the judge
        was to label), ``judge_fallbacks`` (of them, turns that fell back to the heuristic label: answer
        invalid twice or cut off, request failed, budget spent), ``judge_cut_off`` (fallbacks whose answer
        was cut by the judge's token limit) and ``judge_fallback_rate`` (fallbacks / turns, when any turn)."""
        c = self.counts
        out = {shown.TURNS: float(c.get("turns", 0)), shown.FALLBACKS: float(c.get("fallback", 0)),
               shown.CUT_OFF: float(c.get("cut_off", 0))}
        if c.get("turns"):
            out[shown.FALLBACK_RATE] = c["fallback"] / c["turns"]
        return out

    def _turn_label(self, o: Outcome) -> TurnLabel | None:
        item = o.item
        heuristic = item.heuristic
        if o.judgement is not None:
            label = o.judgement.label
            reference: str | None
            if self.settings.mode == "refine" and heuristic is not None:
                reference = heuristic.reference_label or heuristic.label
            else:
                reference = (
                    heuristic.reference_label
                    if heuristic and heuristic.label == label
                    else REFERENCE_OF.get(label, label)
                )
            return TurnLabel(trajectory_id=item.trajectory.id, turn=item.verdict.turn, label=label, source=SOURCE,
                             rationale=o.judgement.rationale, reference_label=reference,
                             confidence=o.judgement.confidence)
        if heuristic is None:
            return None
        return TurnLabel(trajectory_id=item.trajectory.id, turn=item.verdict.turn, label=heuristic.label, source=SOURCE,
                         rationale=f"fallback to the {heuristic.source} label: {o.reason}"[:1000],
                         reference_label=heuristic.reference_label, confidence=None)

    def _report(self, outcomes: list[Outcome], step: int) -> None:
        for o in outcomes:
            if o.status != "fallback":
                continue
            heuristic = o.item.heuristic
            self.event(
                "diagnosis_llm.fallback",
                f"turn {o.item.verdict.turn} of {o.item.trajectory.id}: "
                + (f"heuristic label {heuristic.label!r} kept" if heuristic else "left unlabelled (no heuristic label)")
                + f" ({o.reason[:200]})",
                step=step, trajectory=o.item.trajectory.id, turn=o.item.verdict.turn,
                heuristic_label=heuristic.label if heuristic else None, reason=o.reason, answers=o.answers,
            )
        retried = [(o.item.trajectory.id, o.item.verdict.turn, r) for o in outcomes for r in o.retries]
        if retried:
            self.event("diagnosis_llm.retried", f"{len(retried)} judge request(s) retried after transient errors",
                       step=step, retries=[{"trajectory": t, "turn": n, "error": e} for t, n, e in retried[:20]])
        for note in getattr(self.backend, "notes", [])[:]:
            self.event("diagnosis_llm.backend", note, step=step)
            self.backend.notes.remove(note)
        counts = {s: sum(o.status == s for o in outcomes) for s in ("judged", "cached", "fallback")}
        self.counts = {**counts, "turns": len(outcomes),
                       "cut_off": sum(o.status == "fallback" and CUT_OFF in o.reason for o in outcomes)}
        if outcomes:
            self.event(
                "diagnosis_llm.judged",
                f"{counts['judged']} judged, {counts['cached']} from the cache, {counts['fallback']} fallback(s)",
                step=step,
                **counts,
                tokens_spent=self.budget.spent,
            )
