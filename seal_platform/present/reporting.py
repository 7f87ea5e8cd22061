"""What ``seal-platform show`` prints, read from the run store."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from .. import dynamic_sampling as ds
from ..store import RunStore
from .digest import CheckpointEvaluation, benchmark_of, checkpoint_evaluations
from .fit import fitting, words, wrapped
from .listings import indent, vertical_blocks
from .metrics import MetricCatalog, catalog_or_installed
from .safe import LABEL_LIMIT, clean, safe_text

# Everything a plugin, a tool or the model put in the store (labels, categories, metric names, benchmark names,
# plugin names and versions, interface changes, event messages, errors) is shown through .safe: escape sequences
# and rich markup printed as text, labels clipped.


def step_update_text(metrics: dict[str, float], catalog: MetricCatalog | None = None) -> str:
    """The step's headline optimizer metrics (role ``update``) when it updated the policy, else why it did not
    ("skipped (...)", from the declarations of ``catalog``, default the installed plugins') rather than a row
    of zeros. A step without declared headline metrics shows its first five metrics by name, less those shown
    apart (a group's, dynamic sampling's)."""
    catalog = catalog_or_installed(catalog)
    if catalog.updated(metrics):
        shown = [f"{s.name} {metrics[s.name]:.4g}" for s in catalog.headline() if s.name in metrics]
        if shown:
            return ", ".join(shown)
        apart = catalog.shown_apart()
        return ", ".join(f"{k} {v:.4g}" for k, v in sorted((k, v) for k, v in metrics.items() if k not in apart)[:5])
    return f"skipped ({catalog.no_update_reason(metrics) or 'no update'})"


def steps_table(console: Console, rows: list[Any], catalog: MetricCatalog | None = None) -> RenderableType:
    """The steps of ``show``: one row a step with its metrics (or why it did not update) and a column per
    metric group (``MetricSpec.group``) a step has. Narrower: short headers with a legend and the metrics (and
    the groups) in a table under it; narrower still, one block per step. Metric names stay whole in every
    layout (:mod:`.fit`)."""
    catalog = catalog_or_installed(catalog)
    dynamic = any(ds.DRAWN in (s.metrics or {}) for s in rows)
    fixed = ("step", "epoch", "reward", "trajectories", "groups kept/drawn", "interface", "metrics", "seconds")
    groups = [g for g, members in catalog.groups().items()
              if g not in fixed and any(m.name in (s.metrics or {}) for s in rows for m in members)]
    cells = []
    for s in rows:
        metrics = s.metrics or {}
        cells.append(
            {
                "step": str(s.step),
                "epoch": str(s.epoch),
                "reward": f"{s.mean_reward:.3f}",
                "trajectories": str(s.n_trajectories),
                "groups kept/drawn": f"{int(metrics.get(ds.KEPT, 0))}/{int(metrics.get(ds.DRAWN, 0))}",
                "interface": str(s.interface_revision),
                "metrics": clean(step_update_text(metrics, catalog)),
                **{group: clean(catalog.group_cell(group, metrics)) for group in groups},
                "seconds": f"{sum(s.timings.values()):.1f}",
            }
        )
    cols = ("step", "epoch", "reward", "trajectories") + (("groups kept/drawn",) if dynamic else ()) + (
        "interface", "metrics", *groups, "seconds")

    def full() -> tuple[RenderableType, list[str]]:
        table = Table(title="steps")
        for col in cols:
            table.add_column(col)
        for row in cells:
            table.add_row(*(Text(row[col]) for col in cols))
        return table, words(*cols, *(row[col] for row in cells for col in cols))

    short = {"trajectories": "traj", "groups kept/drawn": "kept/drawn", "interface": "rev", "seconds": "s"}
    long = {"groups kept/drawn": "groups kept/drawn (dynamic sampling)", "interface": "interface revision"}
    numbers = [col for col in cols if col != "metrics" and col not in groups]

    def details(row: dict[str, str]) -> str:
        return "\n".join([row["metrics"], *(f"{group} {row[group]}" for group in groups)])

    def narrow() -> tuple[RenderableType, list[str]]:
        legend = ", ".join(f"{short[col]}: {long.get(col, col)}" for col in numbers if col in short)
        table = Table(title="steps", title_justify="left")
        for col in numbers:
            table.add_column(short.get(col, col), justify="right" if col != "step" else "left")
        metrics = Table(
            title="metrics per step" + (f" (and {', '.join(groups)})" if groups else ""), title_justify="left"
        )
        metrics.add_column("step")
        metrics.add_column("metrics")
        for row in cells:
            table.add_row(*(row[col] for col in numbers))
            metrics.add_row(row["step"], Text(details(row)))
        shown = words(*(short.get(col, col) for col in numbers), *(row[col] for row in cells for col in cols))
        return Group(table, Text(legend, style="dim"), metrics), shown

    def vertical() -> tuple[RenderableType, list[str]]:
        parts: list[RenderableType] = [Text("steps", style="italic")]
        for row in cells:
            parts.append(Text(f"step {row['step']}", style="bold"))
            facts = "; ".join(f"{col} {row[col]}" for col in numbers if col != "step")
            parts.extend(Padding(Text(line), (0, 0, 0, 2), expand=False) for line in (facts, *details(row).split("\n")))
        return Group(*parts), []

    return fitting(console, full, narrow, vertical)


# A run longer than this shows its first and last steps only (``show --all-steps`` shows every one).
SHOWN_STEPS_HEAD, SHOWN_STEPS_TAIL = 10, 20


def _say(console: Console, text: str, indent: str = "", hanging: str = "  ", style: str = "", styled: int = 0) -> None:
    """A line of ``show`` wrapped at spaces to the console's width (:func:`.fit.wrapped`: an id or a path is
    never broken); ``style`` colours its first ``styled`` characters."""
    out = Text(wrapped(clean(text, lines=True), console.width, indent, hanging))
    if style:
        out.stylize(style, len(indent), len(indent) + styled)
    console.print(out, highlight=False, markup=False, soft_wrap=True)


def plugins_view(console: Console, plugins: list[Any]) -> RenderableType:
    """The plugins a run ran with: name, version, status, hooks. Narrower: without the table's borders;
    narrower still, one block per plugin. Names, versions and hook names stay whole (:mod:`.fit`)."""
    heads = ("name", "version", "status", "hooks")
    cells = [(clean(p.name), clean(p.version or ""), clean(p.status), clean(", ".join(p.hooks or [])))
             for p in plugins]

    def table(plain: bool) -> tuple[RenderableType, list[str]]:
        out = Table(title="plugins", box=box.SIMPLE_HEAD if plain else box.HEAVY_HEAD,
                    title_justify="left" if plain else "center")
        for head in heads:
            out.add_column(head)
        for row in cells:
            out.add_row(*(Text(text) for text in row))
        return out, words(*heads, *(text for row in cells for text in row))

    def vertical() -> tuple[RenderableType, list[str]]:
        return vertical_blocks("plugins", [(name, [f"version {version or '-'}; {status}", hooks and f"hooks: {hooks}"])
                                           for name, version, status, hooks in cells]), []

    return fitting(console, lambda: table(False), lambda: table(True), vertical)


def scores_view(console: Console, title: str, kind: str, heads: list[str],
                rows: list[tuple[str, list[str]]]) -> RenderableType:
    """Pass rates after each evaluated step (``rows``: the step and its value under each of ``heads``, each
    a ``kind``: a category or a benchmark). Narrower: the steps as columns and the heads as rows; then the
    heads longer than a value lettered, over a legend; narrower still, one block per step. Every head stays
    whole (:mod:`.fit`)."""
    corner = "after step"
    title, heads = clean(title), [clean(head, LABEL_LIMIT) for head in heads]  # a category or benchmark name
    steps = [step for step, _ in rows]
    cells = [value for _, values in rows for value in values]
    shown = [*words(title, corner), *heads, *steps, *cells]

    def table(columns: list[str], titled: bool) -> Table:
        out = Table(title=Text(title) if titled else None)
        out.add_column(corner)
        for head in columns:
            out.add_column(Text(head), justify="right")
        for step, values in rows:
            out.add_row(step, *values)
        return out

    def full() -> tuple[RenderableType, list[str]]:
        return table(heads, True), shown

    def lettered() -> tuple[RenderableType, list[str]]:
        letters = iter(chr(ord("A") + i) if i < 26 else f"Z{i - 25}" for i in range(len(heads)))
        short = [head if len(head) <= len("average") else next(letters) for head in heads]
        legend = Table.grid(padding=(0, 2))
        legend.add_column(no_wrap=True)
        legend.add_column(no_wrap=True)
        for letter, head in zip(short, heads):
            if letter != head:
                legend.add_row(letter, Text(head))
        return Group(Text(title, style="italic"), table(short, False), legend), [*shown, *short]

    def transposed() -> tuple[RenderableType, list[str]]:
        out = Table()
        out.add_column(f"{kind} / {corner}")
        for step in steps:
            out.add_column(step, justify="right")
        for i, head in enumerate(heads):
            out.add_row(Text(head), *(values[i] for _, values in rows))
        return Group(Text(title, style="italic"), out), [*shown, *words(kind)]

    def vertical() -> tuple[RenderableType, list[str]]:
        parts: list[RenderableType] = [Text(title, style="italic")]
        for step, values in rows:
            parts.append(Text(f"{corner} {step}", style="bold"))
            parts.extend(indent(Text(f"{head}: {value}"), 2) for head, value in zip(heads, values))
        return Group(*parts), []

    return fitting(console, full, transposed, lettered, vertical)


def checkpoint_evaluations_view(console: Console, evaluations: list[CheckpointEvaluation]) -> RenderableType:
    """The checkpoints ``seal-platform eval`` evaluated: step, evaluation set, tasks, average, when. Narrower:
    one block per evaluation. Evaluation sets stay whole (:mod:`.fit`)."""
    title = "checkpoints evaluated by `seal-platform eval` (pass rate, %)"
    heads = ("after step", "evaluation set", "tasks", "average", "at")
    cells = [(str(e.after_steps), clean(e.eval_set), str(e.n_tasks), f"{e.average:.2f}",
              f"{e.at:%Y-%m-%d %H:%M}" if e.at else "") for e in evaluations]

    def table() -> tuple[RenderableType, list[str]]:
        out = Table(title=title)
        for col in heads:
            out.add_column(col, justify="right" if col in ("tasks", "average") else "left")
        for row in cells:
            out.add_row(*(Text(text) for text in row))
        return out, [*words(title, *heads), *(text for row in cells for text in row)]

    def vertical() -> tuple[RenderableType, list[str]]:
        return vertical_blocks(title, [(f"after step {step}: {eval_set}",
                                        [f"tasks {tasks}; average {average}" + (f"; at {at}" if at else "")])
                                       for step, eval_set, tasks, average, at in cells]), []

    return fitting(console, table, vertical)


def show_run(store: RunStore, run_id: str, console: Console, all_steps: bool = False,
             catalog: MetricCatalog | None = None) -> None:
    """Print ``seal-platform show``; metrics are shown by ``catalog``'s declarations (default: the installed
    plugins')."""
    run = store.get_run(run_id)
    console.print(Text.assemble(safe_text(f"run {run.id}", style="bold"), safe_text(f" ({run.name}) - {run.status}")),
                  highlight=False)
    _say(console, f"recipe {run.recipe or '-'}; config hash {run.config_hash}; seed {run.seed}")
    ended = f"{run.ended_at:%Y-%m-%d %H:%M:%S}" if run.ended_at else "-"
    started = f"{run.started_at:%Y-%m-%d %H:%M:%S}" if run.started_at else "?"
    _say(console, f"started {started} on {run.host}; ended {ended}")
    console.print(safe_text(f"dir {run.run_dir}"), highlight=False)  # one line however long, for copying
    if run.error:
        _say(console, f"error: {run.error}", style="red", styled=len("error:"))
    if crash_tracebacks(store, run.id):
        _say(console, f"traceback: seal-platform show {run.id} --traceback")

    console.print(plugins_view(console, store.run_plugins(run.id)), soft_wrap=False)

    steps = store.steps(run.id)
    hidden = 0 if all_steps else len(steps) - SHOWN_STEPS_HEAD - SHOWN_STEPS_TAIL
    if hidden > 0:
        steps = steps[:SHOWN_STEPS_HEAD] + steps[-SHOWN_STEPS_TAIL:]
    console.print(steps_table(console, steps, catalog), soft_wrap=False)
    if hidden > 0:
        _say(console, f"{hidden} steps between step {steps[SHOWN_STEPS_HEAD - 1].step} and step "
                      f"{steps[SHOWN_STEPS_HEAD].step} not shown (--all-steps shows them, --json has them).")

    by_bench = evaluations_by_benchmark(store, run)
    for bench, by_step in by_bench.items():
        title = "evaluations (pass rate, %)" if len(by_bench) == 1 else f"evaluations on {bench} (pass rate, %)"
        cats = sorted({c for v in by_step.values() for c in v})
        rows = [(str(step), [*(f"{rates.get(c, 0.0):.2f}" for c in cats), f"{sum(rates.values()) / len(rates):.2f}"])
                for step, rates in sorted(by_step.items())]
        console.print(scores_view(console, title, "category", [*cats, "average"], rows), soft_wrap=False)
    if len(by_bench) > 1:
        rows = []
        for step in sorted({s for by_step in by_bench.values() for s in by_step}):
            cells = [by_bench[b].get(step) for b in by_bench]
            rows.append((str(step), ["-" if c is None else f"{sum(c.values()) / len(c):.2f}" for c in cells]))
        console.print(scores_view(console, "benchmarks side by side (average pass rate, %)", "benchmark",
                                  list(by_bench), rows),
                      soft_wrap=False)

    own = run.config.get("environment", "") if isinstance(run.config, dict) else ""
    by_command = checkpoint_evaluations(store, run.id, own)
    if by_command:
        console.print(checkpoint_evaluations_view(console, by_command), soft_wrap=False)

    labels = Counter(row.label for row in store.labels(run.id))
    if labels:
        _say(console, "labels: " + ", ".join(f"{clean(k, LABEL_LIMIT)} {v}" for k, v in labels.most_common()))

    revisions = store.interfaces(run.id)
    console.print(f"[bold]interface revisions[/] ({len(revisions)})")
    for rev in revisions:
        parent = "-" if rev.parent is None else str(rev.parent)
        when = "before training" if rev.step is None else f"step {rev.step}"
        console.print(f"  revision {rev.revision} (parent {parent}, {when})", highlight=False)
        if rev.changes:
            _say(console, "changes: " + "; ".join(rev.changes), "    ", "      ")
        if rev.driven_by:
            _say(
                console,
                "driven by: " + ", ".join(clean(label, LABEL_LIMIT) for label in rev.driven_by),
                "    ",
                "      ",
            )
        if rev.diff and rev.parent is not None:
            for line in rev.diff.splitlines()[2:40]:
                console.print(safe_text(f"      {line}"), highlight=False)

    ckpts = store.checkpoints(run.id)
    if ckpts:
        listed = [f"step {c.step}" for c in ckpts]
        if len(listed) > 12:  # a long run keeps many: the first and the last
            listed = [*listed[:3], f"... ({len(listed) - 9} more)", *listed[-6:]]
        _say(console, f"checkpoints ({len(ckpts)}): " + ", ".join(listed))
    events = store.events(run.id)
    if events:
        console.print("[bold]events[/]")
        for ev in events[-15:]:
            _say(console, f"{ev.at:%H:%M:%S} {ev.kind}: {ev.message}", "  ", " " * 11)


def crash_tracebacks(store: RunStore, run_id: str) -> list[Any]:
    """The run's ``crash`` events that hold a traceback (the lifecycle stores one with each crash), oldest
    first."""
    return [ev for ev in store.events(run_id)
            if ev.kind == "crash" and isinstance((ev.data or {}).get("traceback"), str) and ev.data["traceback"]]


def show_tracebacks(store: RunStore, run_id: str, console: Console) -> bool:
    """``show RUN --traceback``: the traceback of each crash of the run (a resumed run may have crashed more
    than once), each under the time and message of its crash; False when the run recorded none."""
    run = store.get_run(run_id)
    crashes = crash_tracebacks(store, run.id)
    for ev in crashes:
        _say(console, f"crash at {ev.at:%Y-%m-%d %H:%M:%S}: {ev.message}", style="red", styled=len("crash"))
        console.print(safe_text(ev.data["traceback"].rstrip("\n"), lines=True), highlight=False, soft_wrap=True)
    return bool(crashes)


def evaluations_by_benchmark(store: RunStore, run: Any) -> dict[str, dict[int, dict[str, float]]]:
    """Pass rate per category, per step, per benchmark (the run's environment first; rows stored before
    benchmarks were recorded count as the run's environment)."""
    own = run.config.get("environment", "") if isinstance(run.config, dict) else ""
    out: dict[str, dict[int, dict[str, float]]] = {own: {}} if own else {}
    for e in store.evaluations(run.id):
        out.setdefault(benchmark_of(e, own), {}).setdefault(e.step, {})[e.category] = e.pass_rate
    return {b: v for b, v in out.items() if v}
