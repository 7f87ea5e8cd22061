"""What the agent did, turn by turn: a run's stored episodes decoded for people and scripts.

The one place that turns the store's rows (compressed trajectories, turn labels, A-Patch label weights) into
readable episodes; ``seal-platform transcripts`` prints them and ``--json`` gives the same data. An episode
is split into turns at its user messages; each turn shows the messages in order (the model's and the
tools'), the calls parsed from the model's messages with their results, the verifier's verdict for the
turn, and every diagnoser's label with its rationale and the A-Patch weight of that label after the step.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from ..store import RunStore
from ..types import Trajectory
from .safe import LABEL_LIMIT, clean


class LabelView(BaseModel):
    source: str
    label: str
    reference_label: str | None = None
    rationale: str = ""
    confidence: float | None = None
    weight_after_step: float | None = None  # A-Patch's weight of this label after the episode's step


class TurnView(BaseModel):
    turn: int
    messages: list[dict[str, Any]] = Field(default_factory=list)  # role, content, trainable, tokens
    calls: list[dict[str, Any]] = Field(default_factory=list)  # name, arguments, result, error, rejected
    verdict: dict[str, Any] | None = None  # passed, reached, checks
    labels: list[LabelView] = Field(default_factory=list)


class EpisodeView(BaseModel):
    run_id: str
    phase: str
    step: int
    trajectory_id: str
    task_id: str
    category: str
    group: str
    sample: int
    reward: float
    finish: str
    interface_revision: int
    infra_failure: str | None = None
    system: str = ""
    # Messages before the task's first turn (worked examples in the conversation, a few-shot dialogue).
    context: list[dict[str, Any]] = Field(default_factory=list)
    turns: list[TurnView] = Field(default_factory=list)


def episode_view(run_id: str, phase: str, step: int, traj: Trajectory, labels: list[Any],
                 weights: dict[str, float]) -> EpisodeView:
    """One stored trajectory (and its label rows) as turns."""
    view = EpisodeView(run_id=run_id, phase=phase, step=step, trajectory_id=traj.id, task_id=traj.task_id,
                       category=traj.category, group=traj.group, sample=traj.sample, reward=traj.reward,
                       finish=traj.finish, interface_revision=traj.interface_revision,
                       infra_failure=traj.infra_failure)
    turns: list[TurnView] = []
    # The task's turns are its last user messages: as many as the verdicts, calls and labels name (a worked
    # example in the conversation comes before them and is context).
    n_turns = 1 + max([v.turn for v in traj.turn_verdicts] + [c.turn for c in traj.tool_calls]
                      + [r.turn for r in labels] + [-1])
    users = sum(1 for m in traj.messages if m.role == "user")
    skip = max(0, users - n_turns) if n_turns else 0
    seen_users = 0
    for message in traj.messages:
        entry = {"role": message.role, "content": message.content, "trainable": message.trainable,
                 "tokens": len(message.token_ids or ())}
        if message.role == "system" and not turns and not view.context and not view.system:
            view.system = message.content
            continue
        if message.role == "user":
            seen_users += 1
        if seen_users <= skip:
            view.context.append(entry)
            continue
        if message.role == "user" or not turns:
            turns.append(TurnView(turn=len(turns)))
        turns[-1].messages.append(entry)
    by_turn = {t.turn: t for t in turns}
    for call in traj.tool_calls:
        turn = by_turn.get(call.turn)
        if turn is None:
            turn = by_turn[call.turn] = TurnView(turn=call.turn)
            turns.append(turn)
        turn.calls.append({"name": call.name, "arguments": call.arguments, "result": call.result,
                           "error": call.error, "rejected": call.rejected})
    for verdict in traj.turn_verdicts:
        turn = by_turn.get(verdict.turn)
        if turn is None:
            turn = by_turn[verdict.turn] = TurnView(turn=verdict.turn)
            turns.append(turn)
        turn.verdict = {"passed": verdict.passed, "reached": verdict.reached, "checks": verdict.checks}
    for row in labels:
        turn = by_turn.get(row.turn)
        if turn is None:
            turn = by_turn[row.turn] = TurnView(turn=row.turn)
            turns.append(turn)
        turn.labels.append(LabelView(source=row.source, label=row.label, reference_label=row.reference_label,
                                     rationale=row.rationale or "", confidence=row.confidence,
                                     weight_after_step=weights.get(row.label, weights.get(row.reference_label or ""))))
    view.turns = sorted(turns, key=lambda t: t.turn)
    return view


def load_episodes(store: RunStore, run_id: str, *, step: int | None = None, task: str | None = None,
                  label: str | None = None, failed: bool = False, evaluation: bool = False,
                  limit: int | None = None) -> list[EpisodeView]:
    """The run's episodes that match the filters, in step order: training rollouts, or with ``evaluation``
    the evaluations' episodes; ``label``: episodes with that label (any diagnoser) in some turn; ``failed``:
    reward below 0.5."""
    run = store.get_run(run_id)
    phase = "eval" if evaluation else "train"
    pairs = _steps_of(store, run.id, phase, step)
    rows = store.labels(run.id, step=step) if not evaluation else []
    by_traj: dict[str, list[Any]] = {}
    for row in rows:
        by_traj.setdefault(row.trajectory_id, []).append(row)
    weights: dict[int, dict[str, float]] = {}
    for w in store.label_weights(run.id):
        weights.setdefault(w.step, {})[w.label] = w.weight
    out = []
    for traj, s in pairs:
        if task is not None and traj.task_id != task:
            continue
        if failed and traj.success:
            continue
        mine = by_traj.get(traj.id, [])
        if label is not None and not any(label in (r.label, r.reference_label) for r in mine):
            continue
        out.append(episode_view(run.id, phase, s, traj, mine, weights.get(s, {})))
        if limit is not None and len(out) >= limit:
            break
    return out


def nothing_matched(store: RunStore, run_id: str, *, evaluation: bool, step: int | None, label: str | None) -> str:
    """What the run has, for a filter that matched no episode: its steps with episodes of that phase, and,
    for an unknown ``label``, the labels it has (with the closest first)."""
    import difflib

    from sqlalchemy import select

    from ..store import models as m

    run = store.get_run(run_id)
    phase = "eval" if evaluation else "train"
    with store.session() as s:
        # As stored: a step that is not a number, a label that is not text (a damaged row) is not listed.
        steps = sorted(v for v in s.scalars(select(m.TrajectoryRow.step).distinct().where(
            m.TrajectoryRow.run_id == run.id, m.TrajectoryRow.phase == phase)) if type(v) is int)
        labels = sorted(v for v in s.scalars(select(m.TurnLabelRow.label).distinct().where(
            m.TurnLabelRow.run_id == run.id)) if isinstance(v, str))
    what = "evaluation" if evaluation else "training"
    parts = [f"no episode matches; run {run.id} has {what} episodes at "
             + (f"step(s) {', '.join(map(str, steps))}" if steps else "no step")]
    if step is not None and step not in steps and steps:
        parts.append(f"not at step {step}" + (" (evaluations are numbered by the steps done before them)"
                                               if evaluation else ""))
    if label is not None and label not in labels:
        close = difflib.get_close_matches(label, labels, n=1)
        parts.append(
            f"no turn is labelled {label!r}"
            + (f" (did you mean {clean(close[0], LABEL_LIMIT)!r}?)" if close else "")
            + (
                f"; its labels: {', '.join(clean(lab, LABEL_LIMIT) for lab in labels)}"
                if labels
                else "; it has no labels"
            )
        )
    return "; ".join(parts) + "."


def _steps_of(store: RunStore, run_id: str, phase: str, step: int | None) -> list[tuple[Trajectory, int]]:
    """(trajectory, step) pairs: the store keeps the step on each trajectory row."""
    from sqlalchemy import select

    from ..store import models as m
    from ..store import readable_rows

    with store.session() as s:
        q = select(m.TrajectoryRow).where(m.TrajectoryRow.run_id == run_id, m.TrajectoryRow.phase == phase)
        if step is not None:
            q = q.where(m.TrajectoryRow.step == step)
        rows = readable_rows(s.scalars(q.order_by(m.TrajectoryRow.step)))
    pairs = ((store.read_trajectory(r), r.step) for r in rows)  # a blob that cannot be read: a line, left out
    return [(t, step) for t, step in pairs if t is not None]


class StepTranscripts(BaseModel):
    """The episodes of one phase at one step that the report embeds, out of ``total`` (``failed`` of them)."""

    phase: str  # train | eval
    step: int
    total: int
    failed: int
    episodes: list[EpisodeView] = Field(default_factory=list)

    @property
    def anchor(self) -> str:
        return f"transcripts-{self.phase}-{self.step}"


def report_transcripts(store: RunStore, run_id: str, *, eval_limit: int = 20,
                       train_groups: int = 1) -> list[StepTranscripts]:
    """What the HTML report shows of a run's episodes: for every evaluation, its episodes (those that failed
    first, at most ``eval_limit``); for every training step, ``train_groups`` of its groups with all their
    samples (groups whose rewards differ first: they carry the GRPO signal), with their labels."""
    from sqlalchemy import select
    from sqlalchemy.orm import defer

    from ..store import models as m
    from ..store import readable_rows

    run = store.get_run(run_id)
    T = m.TrajectoryRow
    with store.session() as s:
        # The whole rows but their blobs (not loaded here): each is checked as it loads, a damaged one left out.
        rows = readable_rows(
            s.scalars(select(T).options(defer(T.blob)).where(T.run_id == run.id).order_by(T.step, T.id))
        )
    by_step: dict[tuple[str, int], list[Any]] = {}
    for row in rows:
        by_step.setdefault((row.phase, row.step), []).append(row)
    chosen: dict[tuple[str, int], list[str]] = {}
    for (phase, step), found in by_step.items():
        if phase == "eval":
            ordered = sorted(found, key=lambda r: (r.reward > 0.5, r.id))
            chosen[(phase, step)] = [r.id for r in ordered[:eval_limit]]
            continue
        groups: dict[str, list[Any]] = {}
        for r in found:
            groups.setdefault(r.group, []).append(r)
        picked = sorted(groups.values(), key=lambda g: (len({x.reward for x in g}) == 1, g[0].group))[:train_groups]
        chosen[(phase, step)] = [r.id for g in picked for r in sorted(g, key=lambda x: x.sample)]
    ids = [i for v in chosen.values() for i in v]
    blobs: dict[str, Trajectory] = {}
    labels: dict[str, list[Any]] = {}
    with store.session() as s:
        for start in range(0, len(ids), 500):  # bounded IN lists
            part = ids[start:start + 500]
            for tid, step, blob in s.execute(select(T.id, T.step, T.blob).where(T.id.in_(part))):
                traj = store.read_blob(run.id, tid, step, blob)
                if traj is not None:
                    blobs[tid] = traj
            L = m.TurnLabelRow
            for lab in readable_rows(
                s.scalars(select(L).where(L.run_id == run.id, L.trajectory_id.in_(part)).order_by(L.id))
            ):
                labels.setdefault(lab.trajectory_id, []).append(lab)
    weights: dict[int, dict[str, float]] = {}
    for w in store.label_weights(run.id):
        weights.setdefault(w.step, {})[w.label] = w.weight
    out = []
    for (phase, step), found in sorted(by_step.items(), key=lambda kv: (kv[0][1], kv[0][0] != "train")):
        episodes = [episode_view(run.id, phase, step, blobs[i], labels.get(i, []), weights.get(step, {}))
                    for i in chosen[(phase, step)] if i in blobs]
        out.append(StepTranscripts(phase=phase, step=step, total=len(found),
                                   failed=sum(r.reward <= 0.5 for r in found), episodes=episodes))
    return out


def verdict_word(verdict: dict[str, Any] | None) -> str:
    """" passed", " FAILED", " not reached" or "" (no verdict for the turn)."""
    if verdict is None:
        return ""
    return " passed" if verdict["passed"] else " FAILED" if verdict["reached"] else " not reached"


def turn_lines(turn: TurnView, clip: Any) -> list[tuple[str, str]]:
    """A turn as (text, rich style) lines: its messages, calls with results, checks and labels; ``clip``
    shortens each text and shows its control characters (:func:`clipper`); names and labels are shown the same
    way (:mod:`.safe`). Shared by the one-run view and the side-by-side one."""
    lines: list[tuple[str, str]] = []
    for msg in turn.messages:
        tokens = f", {msg['tokens']} sampled tokens" if msg["tokens"] else ""
        lines.append((f"{clean(msg['role'], LABEL_LIMIT)}{tokens}: {clip(msg['content'])}", ""))
    for call in turn.calls:
        outcome = (
            f"rejected: {clip(str(call['rejected']))}"
            if call["rejected"]
            else f"error: {clip(str(call['error']))}"
            if call["error"]
            else f"-> {clip(str(call['result']))}"
        )
        lines.append((f"call {clean(call['name'], LABEL_LIMIT)}({clip(str(call['arguments']))}) {outcome}", "cyan"))
    if turn.verdict is not None and turn.verdict["checks"]:
        lines.append((f"checks: {clip(str(turn.verdict['checks']))}", "dim"))
    for lab in turn.labels:
        weight = "" if lab.weight_after_step is None else f", A-Patch weight {lab.weight_after_step:.3f}"
        ref = (f" (reference {clean(lab.reference_label, LABEL_LIMIT)})"
               if lab.reference_label and lab.reference_label != lab.label else "")
        why = f": {clip(lab.rationale)}" if lab.rationale else ""
        lines.append((f"label [{clean(lab.source, LABEL_LIMIT)}] {clean(lab.label, LABEL_LIMIT)}{ref}{weight}{why}",
                      "magenta"))
    return lines


def clipper(width: int) -> Any:
    """Model, tool and plugin text as a terminal may show it: clipped at ``width`` characters (with a note) and
    its control characters shown, not obeyed (:func:`.safe.clean`; newlines kept)."""
    def clip(text: str) -> str:
        return clean(text, width, lines=True)

    return clip


def episode_name(ep: Any) -> str:
    """``task ID (CATEGORY)`` of an episode or a pair, as a terminal may show them (:mod:`.safe`)."""
    return f"{clean(ep.task_id, 200)} ({clean(ep.category, LABEL_LIMIT)})"


def render(episodes: list[EpisodeView], *, width: int = 2000) -> Any:
    """A rich renderable of ``episodes`` (contents clipped at ``width`` characters each)."""
    from rich.console import Group
    from rich.text import Text

    clip = clipper(width)
    out: list[Any] = []
    for ep in episodes:
        head = (f"{ep.phase} step {ep.step}  task {episode_name(ep)}  group {clean(ep.group, LABEL_LIMIT)} "
                f"sample {ep.sample}  reward {ep.reward:g}  finish {clean(ep.finish, LABEL_LIMIT)}  "
                f"interface r{ep.interface_revision}")
        out.append(Text(head, style="bold reverse"))
        if ep.infra_failure:
            out.append(Text(f"  infrastructure failure: {clip(ep.infra_failure)}", style="red"))
        if ep.system:
            out.append(Text(f"  system ({len(ep.system)} characters): {clip(ep.system)}", style="dim"))
        if ep.context:
            out.append(Text(f"  context before the task's first turn: {len(ep.context)} message(s) (worked examples; "
                            "--json shows them)", style="dim"))
        for turn in ep.turns:
            verdict = verdict_word(turn.verdict)
            out.append(Text(f"  turn {turn.turn}{verdict}", style="bold green" if "passed" in verdict else "bold"))
            out.extend(Text(f"    {text}", style=style) for text, style in turn_lines(turn, clip))
    if not episodes:
        out.append(Text("no episode matches"))
    return Group(*out)
