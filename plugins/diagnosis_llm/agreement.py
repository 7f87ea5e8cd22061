"""``seal-platform diagnose-agreement RUN``: how the judge's labels compare with the heuristic's.

Over a run's stored turn labels, every turn labelled by both the judge and the heuristic diagnoser is one
pair; the confusion matrix counts the pairs per (heuristic label, judge label) with the judge's mean
confidence in each cell. Fallbacks (turns where the judge gave no valid answer and the heuristic label was
kept, stored with no confidence) are counted apart, not as agreement.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import click
from pydantic import BaseModel, Field

# --store as every core command takes it (a URL or an SQLite file's path); a plugin may import the core.
from seal_platform.commands import store_option


class Cell(BaseModel):
    heuristic: str
    judge: str
    count: int
    mean_confidence: float | None


class Agreement(BaseModel):
    """The confusion matrix of one run's judge labels against its heuristic labels."""

    run_id: str
    judge: str
    heuristic: str
    pairs: int = 0
    agree: int = Field(default=0, description="pairs with the same label")
    agree_reference: int = Field(default=0, description="pairs with the same reference label (a refinement agrees)")
    fallbacks: int = Field(default=0, description="turns where the judge fell back to the heuristic label")
    judge_only: int = Field(default=0, description="judge labels on turns the heuristic did not label")
    heuristic_labels: list[str] = Field(default_factory=list)
    judge_labels: list[str] = Field(default_factory=list)
    cells: list[Cell] = Field(default_factory=list)

    @property
    def agreement(self) -> float | None:
        return self.agree / self.pairs if self.pairs else None


def confusion(run_id: str, rows: Iterable[Any], judge: str, heuristic: str) -> Agreement:
    """The agreement of ``judge`` with ``heuristic`` over label ``rows`` (store rows or :class:`TurnLabel`)."""
    by_source: dict[str, dict[tuple[str, int], Any]] = {judge: {}, heuristic: {}}
    for row in rows:
        if row.source in by_source:
            by_source[row.source][(row.trajectory_id, row.turn)] = row
    result = Agreement(run_id=run_id, judge=judge, heuristic=heuristic)
    cells: dict[tuple[str, str], list[float]] = defaultdict(list)  # confidences (stated ones only)
    for key, j in by_source[judge].items():
        h = by_source[heuristic].get(key)
        if h is None:
            result.judge_only += 1
            continue
        if j.confidence is None:  # no judgement stated: a fallback to the heuristic label
            result.fallbacks += 1
            continue
        result.pairs += 1
        result.agree += j.label == h.label
        result.agree_reference += (j.reference_label or j.label) == (h.reference_label or h.label)
        cells[(h.label, j.label)].append(j.confidence)
    result.cells = [
        Cell(heuristic=h, judge=j, count=len(conf), mean_confidence=round(sum(conf) / len(conf), 4))
        for (h, j), conf in sorted(cells.items())
    ]
    result.heuristic_labels = sorted({c.heuristic for c in result.cells})
    result.judge_labels = sorted({c.judge for c in result.cells})
    return result


def _sources(run: Any, judge: str | None, heuristic: str | None) -> tuple[str, str]:
    """The judge's and the heuristic's sources: as given, else as the run's recipe resolved them."""
    from seal_platform.config import stored_config

    from .judge import SOURCE, heuristic_source
    from .settings import DiagnosisLlmSettings

    if heuristic is None:
        try:
            config = stored_config(run.config)
            settings = DiagnosisLlmSettings.model_validate(config.settings.get("diagnosis_llm") or {})
            heuristic = heuristic_source(config, settings)
        except Exception:  # a run made by another version: the usual heuristic
            heuristic = "bfcl"
    return judge or SOURCE, heuristic or "bfcl"


def render(result: Agreement, console: Any) -> None:
    from rich.table import Table

    if not result.pairs:
        console.print(
            f"run {result.run_id}: no turn labelled by both {result.judge!r} and {result.heuristic!r} with a judgement "
            f"({result.fallbacks} fallback(s), {result.judge_only} judge label(s) without a heuristic one).",
            highlight=False,
        )
        return
    table = Table(title=f"run {result.run_id}: {result.heuristic} (rows) vs {result.judge} (columns): "
                        "pairs (mean judge confidence)")
    table.add_column(f"{result.heuristic} \\ {result.judge}", no_wrap=True)
    for label in result.judge_labels:
        table.add_column(label, justify="right")
    index = {(c.heuristic, c.judge): c for c in result.cells}
    for h in result.heuristic_labels:
        row = []
        for j in result.judge_labels:
            cell = index.get((h, j))
            text = "" if cell is None else f"{cell.count} ({cell.mean_confidence:.2f})"
            row.append(f"[bold]{text}[/]" if cell is not None and h == j else text)
        table.add_row(h, *row)
    console.print(table)
    console.print(
        f"{result.pairs} pair(s): same label {result.agree} ({result.agree / result.pairs:.1%}), same reference label "
        f"{result.agree_reference} ({result.agree_reference / result.pairs:.1%}); {result.fallbacks} fallback(s) to "
        f"the heuristic label not counted; {result.judge_only} judge label(s) on turns the heuristic did not label.",
        highlight=False,
    )


@click.command("diagnose-agreement")
@click.argument("run_id", metavar="RUN")
@store_option
@click.option("--judge", default=None, help="Source of the judge's labels (default: llm_judge).")
@click.option("--heuristic", default=None, help="Source of the heuristic labels (default: as the run's recipe says).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(run_id: str, store_url: str | None, judge: str | None, heuristic: str | None, as_json: bool) -> None:
    """Confusion matrix of the LLM judge's labels against the heuristic diagnoser's over a run's trajectories,
    with the judge's mean confidence per cell."""
    from seal_platform.commands import console, open_store

    store = open_store(store_url)
    run = store.get_run(run_id)
    judge, heuristic = _sources(run, judge, heuristic)
    result = confusion(run.id, store.labels(run.id), judge, heuristic)
    if as_json:
        click.echo(json.dumps({**result.model_dump(), "agreement": result.agreement}, indent=2))
    else:
        render(result, console)
