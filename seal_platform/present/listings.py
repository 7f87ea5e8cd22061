"""The tables of ``seal-platform runs``, ``labels`` and ``settings``, in the layout that fits the terminal.

Each keeps its identifiers (run ids, names, statuses, label names, settings keys) whole at any width
(:mod:`.fit`): today's table where it fits; on a narrower terminal secondary columns go (``runs``) or move
under the text they qualify (``labels``); narrower still, one "key: value" block per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ..labels import REFERENCE_LABELS
from .fit import fitting, words
from .safe import LABEL_LIMIT, clean, safe_text

# What plugins registered (labels, meanings, settings' descriptions and defaults) and what runs were named is
# shown through .safe: control characters visible, never rich markup, labels clipped.


def title_line(title: str) -> Text:
    """A title on one line even when it is wider than the terminal (a store URL stays whole, for copying;
    printed with ``crop=False``)."""
    return Text(clean(title), style="italic", no_wrap=True, overflow="ignore")


def indent(renderable: RenderableType, by: int) -> Padding:
    return Padding(renderable, (0, 0, 0, by), expand=False)


def vertical_blocks(title: str, blocks: Sequence[tuple[str, Sequence[str]]], note: str = "") -> Group:
    """One block per row: its identifier on a line of its own, then its details indented (wrapped at words)."""
    parts: list[RenderableType] = [title_line(title)]
    for head, lines in blocks:
        parts.append(safe_text(head, style="bold"))
        parts.extend(indent(safe_text(line, lines=True), 2) for line in lines if line)
    if note:
        parts.append(Text(note, style="dim"))
    return Group(*parts)


# --- runs ------------------------------------------------------------------------------------------------


def runs_listing(console: Console, runs: Sequence[Any], title: str) -> RenderableType:
    """The runs (store rows, newest first): id, name, status, steps, start, config hash. Narrower: without
    the config hash, then without the start (the id holds it), then one block per run."""
    cells = [(clean(r.id), clean(r.name), clean(r.status), "" if r.last_step is None else str(r.last_step + 1),
              f"{r.started_at:%m-%d %H:%M}" if r.started_at else "?", clean(r.config_hash[:8])) for r in runs]
    heads = ("id", "name", "status", "steps", "started", "config")

    def table(keep: int, narrow: bool) -> tuple[RenderableType, list[str]]:
        if narrow:
            out = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        else:
            out = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
        for i, head in enumerate(heads[:keep]):
            out.add_column(head, no_wrap=i < 3, overflow="fold")
        for row in cells:
            out.add_row(*(Text(cell) for cell in row[:keep]))
        whole = words(*heads[:keep], *(text for row in cells for text in row[:keep]))
        if not narrow:
            return out, whole
        note = Text(f"({', '.join(heads[keep:])}: seal-platform runs --json)", style="dim")
        return Group(title_line(title), out, note), whole

    def vertical() -> tuple[RenderableType, list[str]]:
        return vertical_blocks(title, [(row[0], [f"name: {row[1]}", f"status: {row[2]}",
                                           f"steps: {row[3] or '-'}  started: {row[4]}  config: {row[5]}"])
                                 for row in cells]), []

    return fitting(console, lambda: table(6, False), lambda: table(5, True), lambda: table(4, True), vertical)


# --- labels ----------------------------------------------------------------------------------------------


def labels_listing(console: Console, rows: Sequence[Any], title: str) -> RenderableType:
    """The labels (:func:`seal_platform.labels.label_rows`): diagnoser, label, reference label(s), meaning.
    Narrower: the reference label(s) under the meaning; narrower still, one block per label.

    A label that maps to no other is a reference label itself only when it is one of the SEAL reference labels
    (:data:`seal_platform.labels.REFERENCE_LABELS`) or another listed label maps to it; any other (a
    third-party diagnoser's ``ok``, say) is said to map to none."""
    targets = {*REFERENCE_LABELS, *(ref for row in rows for ref in row.reference)}
    cells = [(clean(row.diagnoser, LABEL_LIMIT), clean(row.label, LABEL_LIMIT),
              tuple(clean(ref, LABEL_LIMIT) for ref in row.reference), clean(row.meaning, lines=True),
              row.label in targets) for row in rows]

    def reference(refs: tuple[str, ...], is_reference: bool) -> str:
        return " | ".join(refs) or ("(itself)" if is_reference else "(none)")

    def maps(refs: tuple[str, ...], is_reference: bool) -> str:
        if refs:
            return f"maps to: {' | '.join(refs)}"
        return "(a reference label)" if is_reference else "(maps to no reference label)"

    names = [text for diagnoser, label, refs, _, _ in cells for text in (diagnoser, label, *refs)]

    def table() -> tuple[RenderableType, list[str]]:
        out = Table(title=title)
        out.add_column("diagnoser", no_wrap=True)
        out.add_column("label", no_wrap=True)
        out.add_column("reference label")
        out.add_column("meaning")
        for diagnoser, label, refs, meaning, is_reference in cells:
            out.add_row(Text(diagnoser), Text(label), Text(reference(refs, is_reference)), Text(meaning))
        return out, names + words("diagnoser label reference label meaning")

    def narrow() -> tuple[RenderableType, list[str]]:
        out = Table(title=title)
        out.add_column("diagnoser", no_wrap=True)
        out.add_column("label", no_wrap=True)
        out.add_column("meaning; reference label")
        for diagnoser, label, refs, meaning, is_reference in cells:
            out.add_row(Text(diagnoser), Text(label),
                        Text(meaning + "\n" if meaning else "").append(maps(refs, is_reference), style="dim"))
        return out, names + words("diagnoser label meaning; reference label")

    def vertical() -> tuple[RenderableType, list[str]]:
        return vertical_blocks(title, [(f"{diagnoser}: {label}", [meaning, maps(refs, is_reference)])
                                       for diagnoser, label, refs, meaning, is_reference in cells]), []

    return fitting(console, table, narrow, vertical)


# --- settings --------------------------------------------------------------------------------------------


def settings_listing(console: Console, rows: Sequence[tuple[str, str, str, str, str]], title: str) -> RenderableType:
    """The plugin settings, (plugin, key, type, default, description) each. Narrower: one block per key,
    under a line per plugin."""
    heads = ("plugin", "key", "type", "default", "description")
    rows = [(clean(owner), clean(key), clean(kind), clean(default), clean(description, lines=True))
            for owner, key, kind, default, description in rows]

    def table() -> tuple[RenderableType, list[str]]:
        out = Table(title=title)
        for i, col in enumerate(heads):
            out.add_column(col, no_wrap=i < 2, overflow="fold")
        for row in rows:
            out.add_row(*(Text(text) for text in row))
        return out, [*heads, *(text for row in rows for text in row[:2])]

    def vertical() -> tuple[RenderableType, list[str]]:
        parts: list[RenderableType] = [title_line(title)]
        plugin = None
        for owner, key, kind, default, description in rows:
            if owner != plugin:
                plugin = owner
                parts.append(Text(f"plugin {owner}", style="bold underline"))
            parts.append(indent(Text(key, style="bold"), 2))
            parts.append(indent(Text(f"type: {kind}; default: {default}"), 4))
            if description:
                parts.append(indent(Text(description, style="dim"), 4))
        return Group(*parts), []

    return fitting(console, table, vertical)


def runs_json(store: Any, listed: list[Any]) -> list[dict[str, Any]]:
    """``seal-platform runs --json``: each listed run's row with its updates and evaluations."""
    from .digest import load_digest

    rows = []
    for r in listed:
        digest = load_digest(store, r.id)
        rows.append({
            "id": r.id, "name": r.name, "status": r.status, "steps": None if r.last_step is None else r.last_step + 1,
            "started_at": r.started_at.isoformat() if r.started_at else None,
            "ended_at": r.ended_at.isoformat() if r.ended_at else None,
            "config_hash": r.config_hash, "run_dir": r.run_dir, "recipe": r.recipe, "seed": r.seed,
            "updates": digest.updates(),
            "evaluations": {name: [{"step": p.step, "pass_rate": p.average, "n_tasks": p.n_tasks}
                                   for p in points] for name, points in digest.evaluations.items()},
            "checkpoint_evaluations": [e.model_dump(mode="json") for e in digest.checkpoint_evaluations],
        })
    return rows


def evaluation_table(run_id: str, done: int, result: Any) -> Table:
    """``seal-platform eval``'s result: the pass rate per category and the average."""
    table = Table(title=f"run {run_id}, checkpoint after {done} step(s), split {result.split} ({result.n_tasks} tasks)")
    table.add_column("category")
    table.add_column("pass rate (%)", justify="right")
    for cat, rate in sorted(result.per_category.items()):
        table.add_row(Text(clean(cat, lines=True)), f"{rate:.2f}")
    table.add_row("[bold]average[/]", f"{result.average:.2f}")
    return table
