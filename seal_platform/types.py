"""Shared types: everything that crosses a hook or goes to the run store is one of these.

They are plain pydantic models so plugins written by strangers can build, validate and serialise them
without importing anything heavy. Token-level fields are optional: an environment that never trains (an
evaluation-only benchmark) can leave them empty.
"""

from __future__ import annotations

import difflib
import json
import re
import uuid
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

Role = Literal["system", "user", "assistant", "tool"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with its lone surrogates replaced by U+FFFD, so it has a UTF-8 encoding (see
    :func:`make_text_valid`)."""
    return _SURROGATE.sub("\ufffd", text)


# Free text that may come from model or tool-server output (a JSON escape "\ud800", an error message quoting a
# model-chosen name): made valid when the model is built, so a tokenizer, a print or the store never sees a lone
# surrogate.
Text = Annotated[str, AfterValidator(valid_text)]


class Task(BaseModel):
    """One benchmark task. ``payload`` is environment-defined (for BFCL: the raw task record)."""

    model_config = ConfigDict(frozen=True)

    id: str
    category: str
    split: str
    payload: dict[str, Any] = Field(default_factory=dict)


class Message(BaseModel):
    """One chat message of an episode.

    Assistant messages produced by a rollout engine carry the exact sampled ``token_ids`` and their
    ``logprobs``; trainers use those instead of re-tokenising ``content`` (re-tokenisation drifts).
    ``trainable`` is the loss mask at message granularity: only model-generated messages are trained on.
    """

    role: Role
    content: Text
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    trainable: bool = False
    name: str | None = None
    # The policy version (the trainer's optimizer-update count at the last weight push) that sampled it.
    policy_version: int | None = None
    # The adapter version (e.g. LoRA) that sampled it, when the engine serves adapters on a frozen base.
    adapter: str | None = None
    # The engine stopped this generation at its token limit (finish_reason "length"): the text is incomplete.
    cut_off: bool = False

    @classmethod
    def from_generation(cls, generation: Generation) -> Message:
        """The trainable assistant message of an engine's ``generation``: its text, the exact sampled tokens
        and log-probs, and the policy (and adapter) version that sampled it. Environments build their
        assistant messages with this, so what a trainer and the staleness rule read is copied in one place."""
        return cls(
            role="assistant", content=generation.text, token_ids=list(generation.token_ids),
            logprobs=list(generation.logprobs), trainable=True, policy_version=generation.policy_version,
            adapter=generation.adapter, cut_off=generation.finish_reason == "length",
        )

    def chat(self) -> dict[str, str]:
        """The message as the plain ``{"role", "content"}`` dict chat templates expect."""
        return {"role": self.role, "content": self.content}


class ToolCall(BaseModel):
    """A tool call the model made, as parsed and as executed."""

    turn: int
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    result: str | None = None
    error: str | None = None
    # Why the call was rejected before execution (parse error, unknown tool, bad argument) if it was.
    rejected: str | None = None


class TurnVerdict(BaseModel):
    """The verifier's finding for one ground-truth turn."""

    turn: int
    passed: bool
    reached: bool = True
    checks: dict[str, Any] = Field(default_factory=dict)


def _children(value: Any) -> list[Any]:
    if isinstance(value, BaseModel):
        return [getattr(value, name) for name in type(value).model_fields]
    if isinstance(value, dict):
        return [*value.keys(), *value.values()]
    if isinstance(value, (list, tuple)):
        return list(value)
    return []


def _count_surrogates(value: Any) -> int:
    """Lone surrogates in every string of ``value`` (iterative: model output may nest thousands deep)."""
    count, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                count += len(_SURROGATE.findall(item))
        else:
            stack.extend(_children(item))
    return count


def _clean_in_place(value: Any) -> Any:
    """Replace lone surrogates with U+FFFD in every string of ``value`` (dict keys too), changing its lists and
    dicts in place, iteratively; returns the cleaned value (a new object only when ``value`` is a string)."""
    if isinstance(value, str):
        return valid_text(value)
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key in list(item):
                child = item[key]
                if isinstance(key, str) and _SURROGATE.search(key):
                    del item[key]
                    key = valid_text(key)
                item[key] = valid_text(child) if isinstance(child, str) else child
                if not isinstance(child, str):
                    stack.append(child)
        elif isinstance(item, list):
            for i, child in enumerate(item):
                if isinstance(child, str):
                    item[i] = valid_text(child)
                else:
                    stack.append(child)
    return value


def make_text_valid(traj: Trajectory) -> int:
    """Model output is untrusted: JSON escapes such as ``"\\ud800"`` in a tool call's arguments decode to lone
    surrogates, which are not text (no UTF-8 encoding exists, so storing or printing them fails). Every string
    of ``traj`` gets them replaced with U+FFFD, in place; the number replaced is added to
    ``traj.metadata["replaced_surrogates"]`` and returned. (A message's content is :data:`Text`, valid from
    the start: its replacements are not counted here.)"""
    count = _count_surrogates([traj.messages, traj.tool_calls, traj.turn_verdicts, traj.metadata])
    if count:
        for message in traj.messages:
            message.content = _clean_in_place(message.content)
        for call in traj.tool_calls:
            call.name = _clean_in_place(call.name)
            call.arguments = _clean_in_place(call.arguments)
            call.result, call.error = _clean_in_place(call.result), _clean_in_place(call.error)
            call.rejected = _clean_in_place(call.rejected)
        for verdict in traj.turn_verdicts:
            verdict.checks = _clean_in_place(verdict.checks)
        traj.metadata = _clean_in_place(traj.metadata)
        traj.metadata["replaced_surrogates"] = traj.metadata.get("replaced_surrogates", 0) + count
    return count


class Trajectory(BaseModel):
    """One rollout of one task under one interface revision.

    ``id`` must be unique across the whole run store, not only within one ``collect`` or ``evaluate`` call:
    it is the trajectory's key in the store, which labels and weights refer to. Leave it at its default (a
    fresh uuid4); an id built from the task and sample (``f"{task_id}:{sample}"``) repeats in the next step,
    evaluation or run. The core checks ids (and that ``reward`` is a finite number) before it stores a step
    or an evaluation, and refuses a repeated one with an error naming the plugin.

    ``reward`` has no fixed range (an environment may pass its own reward through); the trajectory counts
    as a success, for the pass rate, when it is above 0.5."""

    # Unique across the run store (see above): leave the default.
    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    task_id: str
    category: str
    # Rollouts of the same task in the same step share a group (GRPO normalises within it).
    group: str
    sample: int = 0
    interface_revision: int = 0
    messages: list[Message] = Field(default_factory=list)
    tool_calls: list[ToolCall] = Field(default_factory=list)
    reward: float = 0.0
    turn_verdicts: list[TurnVerdict] = Field(default_factory=list)
    # How the episode ended: "completed", "step_limit", "context_limit", "error", ...
    finish: str = "completed"
    metadata: dict[str, Any] = Field(default_factory=dict)
    # Why the episode was lost to the infrastructure (a dead actor, a lost node, its time limit), if it was.
    # Such a trajectory says nothing about the policy: it is never diagnosed, and its group is masked out of
    # the update (see seal_platform.infra).
    infra_failure: str | None = None

    @model_validator(mode="after")
    def _valid_text(self) -> Trajectory:
        make_text_valid(self)  # see make_text_valid: lone surrogates replaced and counted
        return self

    @property
    def success(self) -> bool:
        return self.reward > 0.5

    @property
    def generated_tokens(self) -> int:
        return sum(len(m.token_ids or ()) for m in self.messages if m.trainable)

    @property
    def policy_version(self) -> int | None:
        """The oldest policy version among its generated messages (None when no engine reported one)."""
        versions = [m.policy_version for m in self.messages if m.trainable and m.policy_version is not None]
        return min(versions) if versions else None


class TurnLabel(BaseModel):
    """A diagnosis of one ground-truth turn of one trajectory."""

    trajectory_id: str
    turn: int
    label: Text
    source: str
    rationale: Text = ""
    # For diagnosers with a finer taxonomy: the reference label this one maps to (for A-Patch base weights).
    reference_label: str | None = None
    # How sure a diagnoser that can say so (an LLM judge) is of the label, in [0, 1]; None: not stated.
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)


class Interface(BaseModel):
    """A revision of the agent's training interface.

    Revision 0 is the pristine interface that evaluation always uses. ``spec`` is environment-defined (for
    BFCL: which schema affordances, recovery hints and guidelines are active, per category); the core only
    stores, diffs and hands revisions around.
    """

    revision: int = 0
    parent: int | None = None
    step: int | None = None
    system_text: Text = ""
    spec: dict[str, Any] = Field(default_factory=dict)
    changes: list[str] = Field(default_factory=list)
    driven_by: list[str] = Field(default_factory=list)

    def content(self) -> dict[str, Any]:
        """What the agent would see differently: the part that diffs compare."""
        return {"system_text": self.system_text, "spec": self.spec}

    def diff(self, parent: Interface | None) -> str:
        """A unified diff of this revision's content against its parent's (or against nothing), line by line:
        the system text in its own lines (one added guideline is one ``+`` line, not the whole text JSON-escaped
        on one line), the spec as indented JSON."""
        before = _content_lines(parent.content()) if parent else []
        after = _content_lines(self.content())
        return "\n".join(
            difflib.unified_diff(
                before,
                after,
                fromfile=f"revision {parent.revision}" if parent else "nothing",
                tofile=f"revision {self.revision}",
                lineterm="",
            )
        )


def _content_lines(content: dict[str, Any]) -> list[str]:
    """``key:`` then the value indented by two spaces: a string's own lines, anything else as indented JSON."""
    lines: list[str] = []
    for key in sorted(content):
        value = content[key]
        text = value if isinstance(value, str) else json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
        lines.append(f"{key}:")
        lines.extend(f"  {line}" for line in text.splitlines())
    return lines


class ReweightResult(BaseModel):
    """What the ``reweight`` stage returns: a scale per trajectory and the label weights behind them."""

    trajectory_weights: dict[str, float]
    label_weights: dict[str, float] = Field(default_factory=dict)


class EvalResult(BaseModel):
    """A held-out evaluation: pass rate per category and their plain average (in percent)."""

    split: str
    per_category: dict[str, float]
    n_tasks: int
    # Of the n_tasks, those whose episode was lost to the infrastructure (a server that died, refused a
    # session, or did not answer in time): counted here, left out of per_category (they say nothing of the policy).
    n_infra_failures: int = Field(default=0, ge=0)
    trajectories: list[Trajectory] = Field(default_factory=list, exclude=True)

    @classmethod
    def from_trajectories(cls, split: str, trajectories: list[Trajectory]) -> EvalResult:
        """Pass rate (percent of trajectories with ``success``, i.e. reward > 0.5) per category, categories
        in the order they first appear; the one scoring rule of every environment's evaluation."""
        totals: dict[str, list[int]] = {}
        for trajectory in trajectories:
            passed_count = totals.setdefault(trajectory.category, [0, 0])
            passed_count[0] += int(trajectory.success)
            passed_count[1] += 1
        per_category = {category: 100.0 * passed / count for category, (passed, count) in totals.items()}
        return cls(split=split, per_category=per_category, n_tasks=len(trajectories), trajectories=trajectories)

    @property
    def average(self) -> float:
        """The headline pass rate (%): the mean of the per-category pass rates (each category counts once,
        whatever its size), not the share of all tasks that passed."""
        if not self.per_category:
            return 0.0
        return sum(self.per_category.values()) / len(self.per_category)


# --- the rollout-engine interface --------------------------------------------------------------------


class SamplingParams(BaseModel):
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 512
    stop: list[str] = Field(default_factory=list)
    seed: int | None = None
    # Constrain the output to JSON following this schema where the engine can (vLLM structured outputs);
    # engines that cannot ignore it, so callers still validate what comes back.
    json_schema: dict[str, Any] | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


class Generation(BaseModel):
    """One completion from a rollout engine.

    ``logprobs`` are the raw log-probabilities of ``token_ids`` under the policy (temperature 1, before any
    sampling transform). ``finish_reason`` is ``"stop"`` (end of sequence or a stop string), ``"length"``
    (``max_new_tokens`` reached) or ``"prompt_too_long"`` (the prompt fills the context; nothing generated).
    """

    text: str
    token_ids: list[int]
    logprobs: list[float]
    prompt_tokens: int = 0
    finish_reason: str = "stop"
    # The policy version of the weights it was sampled with (engines that track versions set it).
    policy_version: int | None = None
    adapter: str | None = Field(
        default=None,
        description="The adapter version (e.g. LoRA) that generated it, when the engine serves adapters on a "
        "frozen base; None: the engine's full weights.",
    )


TrackKind = Literal["step", "evaluation", "interface", "labels", "report"]


class TrackEvent(BaseModel):
    """One thing the run recorded, handed to the ``track`` hook. Which fields are set depends on ``kind``
    (see :mod:`seal_platform.tracking`)."""

    kind: TrackKind
    run_id: str
    step: int
    metrics: dict[str, float] = Field(default_factory=dict)
    evaluation: EvalResult | None = None
    interface: Interface | None = None
    labels: list[TurnLabel] = Field(default_factory=list)
    # ``step`` events: the A-Patch weight of each label used in the step (empty when nothing was reweighted).
    label_weights: dict[str, float] = Field(default_factory=dict)
    # ``report`` events: the HTML report the run's end wrote.
    path: str | None = None
