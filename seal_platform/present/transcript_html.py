"""Transcripts as HTML, for the run report: the same episodes ``seal-platform transcripts`` prints (decoded by
:mod:`seal_platform.present.transcripts`), each folded in a ``<details>`` block.

Everything in a transcript is untrusted (model text, tool arguments and results, a verifier's checks,
a judge's rationale, even task ids): every value goes through :func:`html.escape`, and the page has no
scripts for any of it to reach.
"""

from __future__ import annotations

import html
import json
from typing import Any

from .transcripts import EpisodeView, StepTranscripts, TurnView

CSS = """
.episode { border-left: 3px solid #ccc; padding-left: 0.6em; margin: 0.4em 0; }
.episode.fail { border-color: #c66; } .episode.pass { border-color: #6a6; }
.turn { margin: 0.4em 0 0.6em 0.5em; } .turnhead { font-weight: bold; margin: 0.2em 0; }
.msg pre { margin: 0.1em 0 0.3em 0; white-space: pre-wrap; word-break: break-word; }
.role { color: #555; font-size: 0.85em; } .call { color: #046; } .label { color: #705; }
.verdict-fail { color: #a00; } .verdict-pass { color: #070; }
table.pair { width: 100%; table-layout: fixed; } table.pair td, table.pair th { text-align: left; vertical-align: top; }
table.pair td:first-child, table.pair th:first-child { width: 5em; } tr.differs td { background: #fff4d6; }
"""

MAX_CHARS = 3000  # of one message, call or check in the report (`seal-platform transcripts --json` has all)


def esc(value: Any, limit: int = MAX_CHARS, attribute: bool = False) -> str:
    """``value`` as escaped text (quotes too for an ``attribute``), clipped at ``limit`` characters (saying how
    many more there were)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) > limit:
        text = text[:limit] + f" ... [{len(text) - limit} more characters]"
    return html.escape(text, quote=attribute)


def _verdict(verdict: dict[str, Any] | None) -> tuple[str, str]:
    if verdict is None:
        return "", ""
    if verdict.get("passed"):
        return " passed", "verdict-pass"
    return (" FAILED", "verdict-fail") if verdict.get("reached") else (" not reached", "verdict-fail")


def episode_html(ep: EpisodeView, *, open_: bool = False, shown: dict[str, str] | None = None) -> str:
    """One episode, turn by turn: messages, parsed calls with their results, verdict and checks, labels.
    ``shown``: system texts and worked examples already on the page (text -> the episode anchor that has them),
    linked to instead of repeated; this episode's are added."""
    state = "pass" if ep.reward > 0.5 else "fail"
    head = (f"task {esc(ep.task_id, 200)} ({esc(ep.category, 100)}), sample {ep.sample}: reward {ep.reward:g}, "
            f"finish {esc(ep.finish, 50)}, interface r{ep.interface_revision}")
    parts = [
        f'<details class="episode {state}"{" open" if open_ else ""} '
        f'id="ep-{esc(ep.trajectory_id, 80, attribute=True)}">'
        f"<summary>{head}</summary>"
    ]
    if ep.infra_failure:
        parts.append(f'<p class="verdict-fail">infrastructure failure: {esc(ep.infra_failure)}</p>')
    anchor = f"ep-{esc(ep.trajectory_id, 80, attribute=True)}"
    context = json.dumps(ep.context, sort_keys=True, ensure_ascii=False) if ep.context else ""
    for kind, key, what in (
            ("system", ep.system, f"system text ({len(ep.system)} characters)"),
            ("context", context, f"{len(ep.context)} message(s) before the task's first turn (worked examples)")):
        if not key:
            continue
        if shown is not None and key in shown:
            parts.append(f'<p class="meta">{what}: as in <a href="#{shown[key]}">this episode</a></p>')
            continue
        # The link goes to the text itself: a browser opens the closed <details> around a fragment's target
        # (the episode's and this one) and scrolls to it, where the episode's own anchor left both closed.
        target = f"{anchor}-{kind}"
        if shown is not None:
            shown[key] = target
        body = (f'<div class="msg"><pre>{esc(ep.system)}</pre></div>' if kind == "system"
                else "".join(_message(m) for m in ep.context))
        parts.append(f'<details><summary>{what}</summary><div id="{target}">{body}</div></details>')
    parts.extend(turn_html(turn) for turn in ep.turns)
    parts.append("</details>")
    return "".join(parts)


def turn_html(turn: TurnView) -> str:
    word, cls = _verdict(turn.verdict)
    parts = [f'<div class="turn"><p class="turnhead">turn {turn.turn}<span class="{cls}">{word}</span></p>']
    parts.extend(_message(m) for m in turn.messages)
    if turn.calls:
        parts.append("<ul>" + "".join(f'<li class="call">{_call(c)}</li>' for c in turn.calls) + "</ul>")
    if turn.verdict is not None and turn.verdict.get("checks"):
        parts.append(f'<div class="msg"><span class="role">checks</span><pre>{esc(turn.verdict["checks"])}</pre></div>')
    if turn.labels:
        parts.append("<ul>" + "".join(f'<li class="label">{_label(lab)}</li>' for lab in turn.labels) + "</ul>")
    parts.append("</div>")
    return "".join(parts)


def _message(msg: dict[str, Any]) -> str:
    tokens = f", {msg['tokens']} sampled tokens" if msg.get("tokens") else ""
    return (f'<div class="msg"><span class="role">{esc(msg.get("role", "?"), 40)}{tokens}</span>'
            f"<pre>{esc(msg.get('content', ''))}</pre></div>")


def _call(call: dict[str, Any]) -> str:
    if call.get("rejected"):
        outcome = f"rejected: {esc(call['rejected'])}"
    elif call.get("error"):
        outcome = f"error: {esc(call['error'])}"
    else:
        outcome = f"&rarr; {esc(call.get('result'))}"
    return f"call <code>{esc(call.get('name'), 200)}({esc(call.get('arguments'))})</code> {outcome}"


def _label(lab: Any) -> str:
    ref = (
        f" (reference {esc(lab.reference_label, 100)})"
        if lab.reference_label and lab.reference_label != lab.label
        else ""
    )
    weight = "" if lab.weight_after_step is None else f", A-Patch weight {lab.weight_after_step:.3f}"
    conf = "" if lab.confidence is None else f", confidence {lab.confidence:.2f}"
    why = f": {esc(lab.rationale)}" if lab.rationale else ""
    return f"[{esc(lab.source, 100)}] <b>{esc(lab.label, 100)}</b>{ref}{conf}{weight}{why}"


def transcripts_section(steps: list[StepTranscripts]) -> str:
    """The report's transcript view: one block per evaluation and per training step (anchors
    ``#transcripts-eval-N`` and ``#transcripts-train-N``, linked from the report's tables)."""
    shown: dict[str, str] = {}
    parts = ["<h2 id=\"transcripts\">Transcripts</h2><p>What the agent did, turn by turn: every evaluation's "
             "episodes (failed ones first) and a sample of each training step's groups (groups with mixed "
             "rewards first), with verdicts, labels and A-Patch weights. All of it, for one step or task: "
             "<code>seal-platform transcripts RUN --step N [--eval] [--task ID]</code>.</p>"]
    if not steps:
        return parts[0] + "<p>No episode was stored.</p>"
    for block in steps:
        what = (f"Evaluation after {block.step} step(s)" if block.phase == "eval"
                else f"Training step {block.step}")
        unit = "episodes" if block.phase == "eval" else "rollouts"
        parts.append(f'<h3 id="{block.anchor}">{what}: {block.total} {unit}, {block.failed} failed; '
                     f"{len(block.episodes)} shown</h3>")
        parts.extend(episode_html(ep, shown=shown) for ep in block.episodes)
    return "".join(parts)


def link(steps: list[StepTranscripts] | None, phase: str, step: int, text: str) -> str | None:
    """An ``<a>`` to the block of ``phase`` at ``step``, or None when the report has none."""
    if not steps or not any(b.phase == phase and b.step == step for b in steps):
        return None
    return f'<a href="#transcripts-{phase}-{step}">{html.escape(text)}</a>'
