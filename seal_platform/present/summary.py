"""The end-of-run summary and the ``compare`` table, as rich renderables that stay readable at 80 columns
and when piped (narrow tables, no wide free-text columns)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from .digest import RunDigest
from .fit import fitting, words
from .metrics import MetricCatalog, catalog_or_installed
from .safe import LABEL_LIMIT, clean, label_text, safe_text

# Every name below that a plugin or the recipe chose (a category, an evaluation set, a label, a stage, a run's
# name) goes through .safe: shown, never obeyed as escape sequences or rich markup, and labels clipped.


def _table(title: str | Text, *columns: str, right: tuple[int, ...] = ()) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for i, col in enumerate(columns):  # headers as Text: a run's name in one is never markup
        table.add_column(safe_text(col, lines=True), justify="right" if i in right else "left", overflow="fold")
    return table


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def pass_rate_tables(digest: RunDigest) -> list[Table]:
    """Per evaluation set: each category's pass rate before and after training, and their average."""
    out = []
    for eval_set in digest.evaluations:
        first, last = digest.first_and_last(eval_set)
        assert first is not None and last is not None
        single = first.step == last.step
        cols = (
            ("category", f"step {last.step}")
            if single
            else ("category", f"step {first.step}", f"step {last.step}", "change")
        )
        table = _table(safe_text(f"pass rate (%) on {eval_set}"), *cols, right=tuple(range(1, len(cols))))
        cats = sorted(set(first.per_category) | set(last.per_category))
        rows = [(c, first.per_category.get(c), last.per_category.get(c)) for c in cats]
        rows.append(("average", first.average, last.average))
        for cat, before, after in rows:
            name = safe_text(cat, style="bold" if cat == "average" else "")
            if single:
                table.add_row(name, _pct(after))
            else:
                change = None if before is None or after is None else after - before
                table.add_row(name, _pct(before), _pct(after), "-" if change is None else f"{change:+.1f}")
        out.append(table)
    return out


def labels_table(digest: RunDigest) -> Table | None:
    if not digest.labels:
        return None
    table = _table("turn labels seen (training rollouts)", "diagnoser", "label", "turns", right=(2,))
    for source, counts in digest.labels.items():
        for i, (label, n) in enumerate(counts.items()):
            table.add_row(label_text(source) if i == 0 else "", label_text(label), str(n))
    return table


def weights_table(digest: RunDigest) -> Table | None:
    weights = digest.final_label_weights()
    if not weights:
        return None
    step = max(digest.label_weights)
    table = _table(f"A-Patch label weights after step {step}", "label", "weight", right=(1,))
    for label, weight in sorted(weights.items()):
        table.add_row(label_text(label), f"{weight:.3f}")
    return table


def _short_changes(changes: list[str]) -> str:
    """``"direct: +recovery (evidence...)"`` entries grouped by what they change, without the evidence (the
    "driven by" line names the labels; `show` and the report keep every change in full)."""
    grouped: dict[str, list[str]] = {}
    for change in changes:
        head = change.split(" (", 1)[0]
        where, sep, what = head.partition(": ")
        if not sep:
            where, what = "", head
        what = what.split(" ", 1)[0] if what.startswith("guidelines") else what
        if what not in grouped.setdefault(where, []):
            grouped[where].append(what)
    return "; ".join(f"{where}: {', '.join(whats)}" if where else ", ".join(whats) for where, whats in grouped.items())


def revisions_lines(digest: RunDigest) -> Text:
    text = Text()
    text.append(f"interface revisions: {len(digest.revisions)}\n", style="bold")
    for rev in digest.revisions:
        when = "before training" if rev.step is None else f"step {rev.step}"
        what = (
            _short_changes(rev.changes) if rev.changes else ("pristine" if rev.parent is None else "no listed changes")
        )
        text.append(f"  r{rev.revision} ({when}): {clean(what)}\n")
        if rev.driven_by:
            text.append(f"      driven by: {', '.join(clean(label, LABEL_LIMIT) for label in rev.driven_by)}\n")
    return text


def stage_table(digest: RunDigest, extra: dict[str, float] | None = None) -> Table:
    """Seconds per stage over the whole run (set-up and evaluation from the run's ``stage_time`` events);
    ``extra`` fills in stages the store holds no time for (a run from before those events), as measured by
    the live display."""
    seconds = dict(digest.stage_seconds())
    for stage, value in (extra or {}).items():
        if stage not in seconds:
            seconds[stage] = value
    total = sum(seconds.values())
    table = _table("time per stage", "stage", "seconds", "share", right=(1, 2))
    for stage, value in seconds.items():
        table.add_row(label_text(stage), f"{value:.1f}", f"{100 * value / total:.0f}%" if total else "-")
    table.add_row(Text("total", style="bold"), f"{total:.1f}", "")
    return table


def learning_lines(digest: RunDigest, catalog: MetricCatalog | None = None) -> list[Text]:
    """The headline: each evaluation set's average pass rate before and after training, with the number of
    tasks and of policy updates in between."""
    out = []
    for eval_set in digest.evaluations:
        first, last = digest.first_and_last(eval_set)
        assert first is not None and last is not None
        if first.step == last.step:
            continue
        change = last.average - first.average
        out.append(safe_text(f"{eval_set}: {first.average:.1f}% -> {last.average:.1f}% ({change:+.1f} points, "
                             f"{last.n_tasks} tasks)", style="bold"))
        out.append(Text(f"  evaluated after step {first.step} and after step {last.step}, "
                        f"{digest.updates(catalog)} policy update(s) in between"))
    return out


def run_summary(digest: RunDigest, *, stage_extra: dict[str, float] | None = None, report: str | None = None,
                log: str | None = None, catalog: MetricCatalog | None = None) -> Group:
    """Everything the terminal shows at the end of a run; metrics as ``catalog`` declares them (default: the
    installed plugins')."""
    catalog = catalog_or_installed(catalog)
    parts: list[Any] = [safe_text(f"run {digest.id} ({digest.name}): {digest.status}, {len(digest.steps)} step(s)",
                                  style="bold")]
    parts.extend(learning_lines(digest, catalog))
    parts.extend(pass_rate_tables(digest) or [Text("no evaluation was run")])
    for table in (labels_table(digest), weights_table(digest)):
        if table is not None:
            parts.append(table)
    parts.append(revisions_lines(digest))
    parts.append(stage_table(digest, stage_extra))
    tps = digest.tokens_per_s(catalog)
    trained = sum(catalog.value(s.metrics, "trained_sequences") for s in digest.steps)
    skipped = sum(catalog.value(s.metrics, "skipped_sequences") for s in digest.steps)
    counts = digest.dynamic_sampling()
    if counts:
        parts.append(Text(f"dynamic sampling: {counts['drawn']} groups drawn in {counts['rounds']} collect rounds, "
                          f"{counts['kept']} trained on (mixed outcomes), {counts['uniform']} dropped (all rewards "
                          f"equal), {counts['surplus']} mixed beyond the step's quota"))
    if digest.steps and any(catalog.has(s.metrics, "trained_tokens") for s in digest.steps):
        why = next((spec.description for spec in catalog.with_role("skipped_sequences")
                    if spec.description and any(spec.name in s.metrics for s in digest.steps)), "")
        line = f"policy updates: {digest.updates(catalog)}, " \
               f"trajectories trained {int(trained)}, skipped {int(skipped)}" + (f" ({why})" if why else "")
        if tps:
            line += f", {tps:.0f} trained tokens/s"
        parts.append(Text(line))
    if report:
        parts.append(safe_text(f"report: {report}"))
    if log:
        parts.append(safe_text(f"log:    {log}"))
    return Group(*parts)


# --- compare ---------------------------------------------------------------------------------------------


class CompareRun(BaseModel):
    id: str
    name: str
    status: str
    steps: int
    # eval set -> the step after which its final evaluation was taken (columns of runs that stopped early
    # or crashed come from other steps than their neighbours').
    final_steps: dict[str, int] = Field(default_factory=dict)


class CompareRow(BaseModel):
    """One category (or ``average``) of one evaluation set; ``values`` aligned with ``Comparison.runs``
    (None where a run has no such result)."""

    eval_set: str
    category: str
    values: list[float | None]


class Comparison(BaseModel):
    """Final pass rates of several runs side by side: one column per run, one block of rows per evaluation
    set (benchmark and split), so runs evaluated on several benchmarks compare on each."""

    runs: list[CompareRun]
    rows: list[CompareRow] = Field(default_factory=list)


def compare_runs(digests: list[RunDigest]) -> Comparison:
    finals = [d.final_scores() for d in digests]
    sets = sorted({s for f in finals for s in f})
    rows = []
    for eval_set in sets:
        cats = sorted({c for f in finals for c in f.get(eval_set, {}) if c != "average"}) + ["average"]
        for cat in cats:
            rows.append(
                CompareRow(eval_set=eval_set, category=cat, values=[f.get(eval_set, {}).get(cat) for f in finals])
            )
    return Comparison(
        runs=[CompareRun(id=d.id, name=d.name, status=d.status, steps=len(d.steps),
                         final_steps={s: points[-1].step for s, points in d.evaluations.items() if points})
              for d in digests],
        rows=rows,
    )


def comparison_table(comparison: Comparison, heads: list[str] | None = None) -> Table:
    """One column per run, headed by its name, the end of its id and its status unless completed (or by
    ``heads``: the letters of :func:`comparison_view`'s narrow layout)."""
    if heads is None:
        heads = [f"{clean(r.name)}\n{r.id[-6:]}" + ("" if r.status == "completed" else f"\n({r.status.upper()})")
                 for r in comparison.runs]
    table = _table("final pass rate (%)", "set / category", *heads, right=tuple(range(1, len(comparison.runs) + 1)))
    table.columns[0].no_wrap = True  # category names whole; the run columns hold numbers
    current = None
    for row in comparison.rows:
        if row.eval_set != current:
            current = row.eval_set
            table.add_row(safe_text(row.eval_set, style="bold"), *([""] * len(comparison.runs)))
            steps = [r.final_steps.get(row.eval_set) for r in comparison.runs]
            uneven = len({s for s in steps if s is not None}) > 1
            table.add_row(Text("  after step" + (" (differs!)" if uneven else ""), style="yellow" if uneven else "dim"),
                          *("-" if s is None else str(s) for s in steps))
        name = safe_text(f"  {row.category}", style="bold" if row.category == "average" else "")
        table.add_row(name, *(_pct(v) for v in row.values))
    return table


def comparison_view(console: Console, comparison: Comparison) -> RenderableType:
    """:func:`comparison_table` where it fits the console with every category, run name and status whole;
    narrower, the runs are lettered (A, B, ...) over a legend with their full ids; narrower still, one line
    per category."""
    runs = comparison.runs
    letters = [chr(ord("A") + i) if i < 26 else f"R{i + 1}" for i in range(len(runs))]
    names = [*(clean(r.eval_set) for r in comparison.rows), *(clean(r.category) for r in comparison.rows)]
    cells = [_pct(v) for row in comparison.rows for v in row.values]

    def full() -> tuple[RenderableType, list[str]]:
        shown = [*names, *cells, *(clean(r.name) for r in runs), *(r.id[-6:] for r in runs),
                 *(f"({r.status.upper()})" for r in runs if r.status != "completed")]
        return comparison_table(comparison), shown + words("set / category")

    def legend() -> Table:
        out = Table.grid(padding=(0, 2))
        for _ in range(4):
            out.add_column(no_wrap=True)
        for letter, r in zip(letters, runs):
            out.add_row(letter, safe_text(r.id), safe_text(r.name), "" if r.status == "completed" else r.status.upper())
        return out

    def lettered() -> tuple[RenderableType, list[str]]:
        shown = [*names, *cells, *(r.id for r in runs), *(clean(r.name) for r in runs),
                 *(r.status.upper() for r in runs if r.status != "completed")]
        return Group(legend(), comparison_table(comparison, letters)), shown + letters

    def vertical() -> tuple[RenderableType, list[str]]:
        parts: list[RenderableType] = []
        for letter, r in zip(letters, runs):
            parts.append(safe_text(f"{letter}  {r.id}"))
            parts.append(safe_text(f"   {r.name}" + ("" if r.status == "completed" else f" ({r.status.upper()})")))
        parts.append(Text("final pass rate (%)", style="italic"))
        for eval_set in dict.fromkeys(row.eval_set for row in comparison.rows):
            parts.append(safe_text(eval_set, style="bold"))
            steps = [r.final_steps.get(eval_set) for r in runs]
            parts.append(
                Text("  after step: " + ", ".join(f"{k} {'-' if s is None else s}" for k, s in zip(letters, steps)))
            )
            for row in comparison.rows:
                if row.eval_set == eval_set:
                    parts.append(
                        safe_text(
                            f"  {row.category}: " + ", ".join(f"{k} {_pct(v)}" for k, v in zip(letters, row.values))
                        )
                    )
        return Group(*parts), []

    return fitting(console, full, lettered, vertical)
