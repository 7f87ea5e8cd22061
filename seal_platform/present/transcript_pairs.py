"""Two runs' transcripts of the same tasks side by side: ``seal-platform transcripts RUN_A --against RUN_B``.

Evaluation episodes (``--eval``) are paired by task: each run's last evaluation by default, or the one after
``--step N`` steps (``--against-step M`` for the second run; without it, the same step, except for a run put
against itself, whose second side is then its last evaluation: one run before and after training is
``RUN --against RUN --eval --step 0``). Training rollouts are paired by step, task and sample. Each pair
shows both episodes' rewards, failed turns and diagnoser labels, and turn by turn the two transcripts next to
each other with the turns that differ marked: rich columns on a terminal, plain text otherwise (``--plain``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from ..errors import SealError
from ..store import RunStore
from .safe import LABEL_LIMIT, clean, json_safe
from .transcripts import EpisodeView, TurnView, clipper, episode_name, load_episodes, turn_lines, verdict_word


class EpisodePair(BaseModel):
    task_id: str
    category: str
    a: EpisodeView
    b: EpisodeView
    outcome_differs: bool  # one passed, the other did not
    differing_turns: list[int] = Field(default_factory=list)  # turns whose messages, calls or verdict differ


def _turn_signature(turn: TurnView | None) -> Any:
    if turn is None:
        return None
    return ([(m["role"], m["content"]) for m in turn.messages],
            [(c["name"], repr(c["arguments"]), c["result"], c["error"], c["rejected"]) for c in turn.calls],
            None if turn.verdict is None else (turn.verdict["passed"], turn.verdict["reached"]))


def pair_of(a: EpisodeView, b: EpisodeView) -> EpisodePair:
    turns_a, turns_b = {t.turn: t for t in a.turns}, {t.turn: t for t in b.turns}
    differing = [n for n in sorted(set(turns_a) | set(turns_b))
                 if _turn_signature(turns_a.get(n)) != _turn_signature(turns_b.get(n))]
    return EpisodePair(task_id=a.task_id, category=a.category, a=a, b=b,
                       outcome_differs=(a.reward > 0.5) != (b.reward > 0.5), differing_turns=differing)


def _last_eval_step(store: RunStore, run_id: str) -> int:
    steps = sorted({e.step for e in store.evaluations(run_id)})
    if not steps:
        raise SealError(f"run {run_id} has no evaluation stored: nothing to put side by side with --eval.")
    return steps[-1]


def pair_episodes(store: RunStore, run_a: str, run_b: str, *, evaluation: bool, step: int | None = None,
                  against_step: int | None = None, task: str | None = None, label: str | None = None,
                  failed: bool = False, differ: bool = False, limit: int | None = None) -> list[EpisodePair]:
    """The episodes of ``run_a`` and ``run_b`` on the same tasks, paired (see the module docs). Filters keep a
    pair when either side matches (``label``, ``failed``); ``differ``: only pairs whose outcomes differ."""
    a_id, b_id = store.get_run(run_a).id, store.get_run(run_b).id
    step_a: int | None
    step_b: int | None
    itself = a_id == b_id
    if evaluation:
        step_a = step if step is not None else _last_eval_step(store, a_id)
        if against_step is not None:
            step_b = against_step
        else:  # the same step of the other run; of the same run, its last evaluation (before/after training)
            step_b = step if step is not None and not itself else _last_eval_step(store, b_id)
    else:
        step_a, step_b = step, against_step if against_step is not None else step
    if itself and step_a == step_b and against_step is None:  # asked for in so many words, it is shown
        what = f"step {step_a}" if step_a is not None else "every step"
        raise SealError(f"run {a_id} against itself at {what}: every pair would be the same episode twice; "
                        "give --step and --against-step (e.g. --eval --step 0 for before vs after training).")
    side_a = load_episodes(store, a_id, step=step_a, task=task, evaluation=evaluation)
    side_b = load_episodes(store, b_id, step=step_b, task=task, evaluation=evaluation)
    both_fixed = step_a is not None and step_b is not None

    def key(ep: EpisodeView) -> tuple[Any, ...]:
        return (ep.task_id, ep.sample) if both_fixed else (ep.step, ep.task_id, ep.sample)

    by_key: dict[tuple[Any, ...], EpisodeView] = {}
    for ep in side_b:
        by_key.setdefault(key(ep), ep)
    pairs: list[EpisodePair] = []
    seen: set[tuple[Any, ...]] = set()
    for ep in side_a:
        other = by_key.get(key(ep))
        if other is None or key(ep) in seen:
            continue
        seen.add(key(ep))
        if failed and ep.reward > 0.5 and other.reward > 0.5:
            continue
        if label is not None and not any(label in (lab.label, lab.reference_label)
                                         for e in (ep, other) for t in e.turns for lab in t.labels):
            continue
        pair = pair_of(ep, other)
        if differ and not pair.outcome_differs:
            continue
        pairs.append(pair)
        if limit is not None and len(pairs) >= limit:
            break
    return pairs


def _who(ep: EpisodeView, names: dict[str, str]) -> str:
    return clean(f"{names.get(ep.run_id, ep.run_id)} {ep.phase} step {ep.step}")


def outcome_text(ep: EpisodeView) -> str:
    """Reward, finish, failed turns and the diagnosers' labels of the turns that have any."""
    failed = [str(t.turn) for t in ep.turns if t.verdict is not None and not t.verdict["passed"]]
    labels = [f"{clean(lab.label, LABEL_LIMIT)}@{t.turn}" for t in ep.turns for lab in t.labels if lab.label != "pass"]
    return (
        f"reward {ep.reward:g} ({'passed' if ep.reward > 0.5 else 'failed'}), finish {clean(ep.finish, LABEL_LIMIT)}, "
        f"interface r{ep.interface_revision}; failed turns: {', '.join(failed) or 'none'}; labels: "
        f"{', '.join(labels) or 'none'}"
    )


def render_rich(pairs: list[EpisodePair], names: dict[str, str], *, width: int = 2000) -> Any:
    """Columns: turn (with a mark where the two differ), the first run's transcript, the second's."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    clip = clipper(width)
    out: list[Any] = []
    for pair in pairs:
        mark = "  OUTCOMES DIFFER" if pair.outcome_differs else ""
        out.append(Text(f"task {episode_name(pair)}{mark}", style="bold reverse"))
        table = Table(show_lines=True, expand=True)
        table.add_column("turn", no_wrap=True)
        for ep in (pair.a, pair.b):
            table.add_column(Text(f"{_who(ep, names)}\n{outcome_text(ep)}"), ratio=1, overflow="fold")
        turns_a, turns_b = {t.turn: t for t in pair.a.turns}, {t.turn: t for t in pair.b.turns}
        for n in sorted(set(turns_a) | set(turns_b)):
            cells = []
            for turn in (turns_a.get(n), turns_b.get(n)):
                if turn is None:
                    cells.append(Text("(no such turn)", style="dim"))
                    continue
                cell = Text()
                cell.append(f"turn {n}{verdict_word(turn.verdict)}\n",
                            style="bold green" if verdict_word(turn.verdict) == " passed" else "bold red")
                for text, style in turn_lines(turn, clip):
                    cell.append(text + "\n", style=style or None)
                cells.append(cell)
            table.add_row(Text(f"{n}\n{'differs' if n in pair.differing_turns else 'same'}",
                               style="bold yellow" if n in pair.differing_turns else "dim"), *cells)
        out.append(table)
    if not pairs:
        out.append(Text("no task has episodes in both runs that match"))
    return Group(*out)


def render_plain(pairs: list[EpisodePair], names: dict[str, str], *, width: int = 2000) -> str:
    """The same as plain text: per task the two outcomes, then turn by turn A's lines and B's lines."""
    clip = clipper(width)
    lines: list[str] = []
    for pair in pairs:
        mark = "  [outcomes differ]" if pair.outcome_differs else ""
        lines.append(f"=== task {episode_name(pair)}{mark}")
        for side, ep in (("A", pair.a), ("B", pair.b)):
            lines.append(f"{side}: {_who(ep, names)}: {outcome_text(ep)}")
        turns_a, turns_b = {t.turn: t for t in pair.a.turns}, {t.turn: t for t in pair.b.turns}
        for n in sorted(set(turns_a) | set(turns_b)):
            lines.append(f"--- turn {n} ({'differs' if n in pair.differing_turns else 'same'})")
            for side, turn in (("A", turns_a.get(n)), ("B", turns_b.get(n))):
                if turn is None:
                    lines.append(f"{side} | (no such turn)")
                    continue
                lines.append(f"{side} | turn {n}{verdict_word(turn.verdict)}")
                lines.extend(f"{side} |   {part}" for text, _ in turn_lines(turn, clip) for part in text.split("\n"))
        lines.append("")
    if not pairs:
        lines.append("no task has episodes in both runs that match")
    return "\n".join(lines)


def show_pairs(store: RunStore, run_a: str, run_b: str, *, console: Any, notes: Any, as_json: bool, plain: bool,
               width: int, html_out: str | None, **filters: Any) -> None:
    """``transcripts RUN_A --against RUN_B``: the pairs as JSON, plain text (``plain`` or not a terminal) or
    rich columns on ``console``; with ``html_out`` also as a page (``notes`` says where)."""
    import json
    from pathlib import Path

    import click

    from .html_report import write_page

    pairs = pair_episodes(store, run_a, run_b, **filters)
    a, b = store.get_run(run_a), store.get_run(run_b)
    names = ({a.id: f"A {a.name} {a.id[-6:]}", b.id: f"B {b.name} {b.id[-6:]}"} if a.id != b.id
             else {a.id: f"{a.name} {a.id[-6:]}"})
    if html_out:
        write_page(Path(html_out), pairs_page(pairs, names))
        notes.print(f"wrote {html_out}", highlight=False)
    if as_json:
        click.echo(json_safe(json.dumps([p.model_dump(mode="json") for p in pairs], indent=2, ensure_ascii=False)))
    elif plain or not console.is_terminal:
        click.echo(render_plain(pairs, names, width=width))
    else:
        console.print(render_rich(pairs, names, width=width), highlight=False, markup=False)


def pairs_page(pairs: list[Any], names: dict[str, str]) -> str:
    """Two runs' episodes of the same tasks side by side as one self-contained page (``transcripts --against
    --html``): per task both outcomes, then turn by turn both transcripts, the turns that differ shaded."""
    from .html_report import page
    from .transcript_html import esc, turn_html

    parts = ["<h1>Transcripts side by side</h1><p class=meta>Turns whose messages, calls or verdict differ are "
             "shaded.</p>"]
    for pair in pairs:
        mark = " (outcomes differ)" if pair.outcome_differs else ""
        parts.append(f"<h2>task {esc(pair.task_id, 200)} ({esc(pair.category, 100)}){mark}</h2>")
        head = "".join(f"<th>{esc(names.get(ep.run_id, ep.run_id))} {ep.phase} step {ep.step}<br>"
                       f"<span class=meta>{esc(outcome_text(ep))}</span></th>" for ep in (pair.a, pair.b))
        rows = [f'<table class="pair"><tr><th>turn</th>{head}</tr>']
        turns_a, turns_b = {t.turn: t for t in pair.a.turns}, {t.turn: t for t in pair.b.turns}
        for n in sorted(set(turns_a) | set(turns_b)):
            differs = n in pair.differing_turns
            cells = "".join(f"<td>{turn_html(t) if t is not None else '(no such turn)'}</td>"
                            for t in (turns_a.get(n), turns_b.get(n)))
            rows.append(f'<tr class="{"differs" if differs else "same"}"><td>{n}<br>'
                        f'{"differs" if differs else "same"}</td>{cells}</tr>')
        rows.append("</table>")
        parts.append("".join(rows))
    if not pairs:
        parts.append(f"<p>No task has episodes in both runs that match: {esc(', '.join(names.values()) or 'no runs')} "
                     "(check --step, --against-step, --eval and the filters).</p>")
    return page(f"transcripts side by side: {' vs '.join(names.values())}", "".join(parts))
