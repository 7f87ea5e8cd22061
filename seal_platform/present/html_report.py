"""``seal-platform report RUN`` and ``compare --html``: one self-contained HTML page (plots embedded as PNG
data URIs, no external files, scripts or styles), written with matplotlib's Agg backend."""

from __future__ import annotations

import base64
import contextlib
import html
import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import dynamic_sampling as ds
from ..errors import SealError
from ..registry import MetricSpec
from .digest import REPORT_FILE, RunDigest
from .metrics import MetricCatalog, catalog_or_installed
from .summary import Comparison
from .transcript_html import CSS as TRANSCRIPT_CSS
from .transcript_html import link, transcripts_section
from .transcripts import StepTranscripts

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5em 0; } td, th { padding: 2px 10px; text-align: right; }
td:first-child, th:first-child { text-align: left; } tr:nth-child(even) { background: #f6f6f6; }
pre { background: #f6f6f6; padding: 0.5em; overflow-x: auto; font-size: 0.85em; }
.meta { color: #666; } .add { color: #070; } .del { color: #a00; } img { max-width: 100%; }
.wide { overflow-x: auto; }
details { margin: 0.5em 0; } summary { cursor: pointer; color: #246; }
"""

def _figure_png(draw: Callable[[Any], None], size: tuple[float, float] = (9, 4), ncols: int = 1) -> str:
    """Render ``draw(ax)`` (``draw(axes)`` with ``ncols`` > 1) into a PNG data URI; the figure is cropped to
    what was drawn, legends placed outside the axes included."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, ncols, figsize=size, squeeze=True)
    try:
        draw(ax)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    finally:
        plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _integer_steps(ax: Any) -> None:
    """Training steps are whole numbers: no fractional ticks."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _percent_axis(ax: Any) -> None:
    """A pass rate axis always spans 0-100 %, so a flat 0 % run does not look like noise around zero, with a
    margin so that a line at 0 % or 100 % is drawn above or below the frame, not hidden in it."""
    from matplotlib.ticker import PercentFormatter

    ax.set_ylim(-4, 104)
    ax.set_yticks(range(0, 101, 20))
    ax.yaxis.set_major_formatter(PercentFormatter(100))


# Line styles and markers of a chart's series, in turn: lines that coincide (two runs with the same results,
# several label weights at 1.0) stay visible one behind the other.
_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1, 1, 1)), "v"), ((0, (1, 3)), "x"))


def _style(index: int) -> dict[str, Any]:
    line, marker = _STYLES[index % len(_STYLES)]
    return {"linestyle": line, "marker": marker}


def _legend_below(ax: Any, n_items: int) -> None:
    """The legend under the plot, outside the axes, so it never covers data."""
    if n_items:
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=min(max(n_items, 1), 5),
                  frameon=False)


def _img(uri: str, alt: str) -> str:
    return f'<img src="{uri}" alt="{html.escape(alt)}">'


class _Raw(str):
    """A table cell that is HTML already (a link built from escaped parts), not text to escape."""


def _cell(value: Any) -> str:
    return value if isinstance(value, _Raw) else html.escape(str(value))


def _table(header: list[Any], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{_cell(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<div class="wide"><table><tr>{head}</tr>{body}</table></div>'  # scrolls sideways, not the page


def _linked(steps: list[StepTranscripts] | None, phase: str, step: int, text: str) -> Any:
    found = link(steps, phase, step, text)
    return _Raw(found) if found else text


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _diff_html(diff: str) -> str:
    lines = []
    for line in diff.splitlines():
        cls = "add" if line.startswith("+") and not line.startswith("+++") else (
            "del" if line.startswith("-") and not line.startswith("---") else "")
        text = html.escape(line)
        lines.append(f'<span class="{cls}">{text}</span>' if cls else text)
    return "<pre>" + "\n".join(lines) + "</pre>"


def _pass_rate_section(digest: RunDigest, transcripts: list[StepTranscripts] | None = None) -> str:
    parts = ["<h2>Evaluation: pass rate per category (learning curve)</h2>"]
    if not digest.evaluations:
        return parts[0] + "<p>No evaluation was run.</p>"
    for eval_set, points in digest.evaluations.items():
        cats = sorted({c for p in points for c in p.per_category})
        base = next((p for p in points if p.step == 0), None)

        def draw(ax: Any, points=points, cats=cats, eval_set=eval_set, base=base) -> None:
            for number, cat in enumerate(cats):
                xs = [p.step for p in points if cat in p.per_category]
                ax.plot(xs, [p.per_category[cat] for p in points if cat in p.per_category], label=cat, alpha=0.7,
                        **_style(number))
            ax.plot([p.step for p in points], [p.average for p in points], marker="s", color="black",
                    linewidth=2, label="average")
            if base is not None:
                ax.axhline(base.average, color="grey", linestyle="--", linewidth=1,
                           label=f"base (step 0): {base.average:.1f}%")
            ax.set(title=f"pass rate on {eval_set}", xlabel="training steps done", ylabel="pass rate")
            _percent_axis(ax)
            _integer_steps(ax)
            _legend_below(ax, len(cats) + 1 + (base is not None))

        parts.append(_img(_figure_png(draw), f"pass rate on {eval_set}"))
        sizes = ", ".join(f"after step {p.step}: {p.n_tasks}" for p in points)
        parts.append(f"<p class=meta>{html.escape(eval_set)}: {len(cats)} categor{'y' if len(cats) == 1 else 'ies'}; "
                     f"tasks evaluated {html.escape(sizes)}"
                     + ("" if base is None else f"; base line (before training) {base.average:.1f}%") + "</p>")
        rows = [[c, *(_pct(p.per_category.get(c)) for p in points)] for c in cats]
        rows.append(["average", *(_pct(p.average) for p in points)])
        rows.append(["tasks", *(str(p.n_tasks) for p in points)])
        parts.append(_table(["category (pass rate %)", *(_linked(transcripts, "eval", p.step, f"after {p.step}")
                                                         for p in points)], rows))
    if digest.checkpoint_evaluations:
        parts.append("<h3>Checkpoints evaluated afterwards (<code>seal-platform eval</code>)</h3>")
        parts.append(_table(["after step", "evaluation set", "tasks", "average (%)", "at"], [
            [str(e.after_steps), e.eval_set, str(e.n_tasks), _pct(e.average),
             f"{e.at:%Y-%m-%d %H:%M}" if e.at else ""] for e in digest.checkpoint_evaluations]))
    return "".join(parts)


def _labels_section(digest: RunDigest) -> str:
    parts = ["<h2>Turn labels over steps (per diagnoser)</h2>"]
    if not digest.labels_per_step:
        return parts[0] + "<p>No labels were recorded.</p>"
    for source, per_step in digest.labels_per_step.items():
        labels = sorted({lab for counts in per_step.values() for lab in counts})
        steps = sorted(per_step)

        def draw(ax: Any, per_step=per_step, labels=labels, steps=steps, source=source) -> None:
            bottom = [0] * len(steps)
            for label in labels:
                values = [per_step[s].get(label, 0) for s in steps]
                ax.bar(steps, values, bottom=bottom, label=label)
                bottom = [b + v for b, v in zip(bottom, values)]
            ax.set(title=f"labels from {source}", xlabel="step", ylabel="turns")
            _integer_steps(ax)
            _legend_below(ax, len(labels))

        parts.append(_img(_figure_png(draw), f"labels from {source}"))
        parts.append(_table(["label", "turns (all steps)", *(f"step {s}" for s in steps)],
                            [[k, v, *(per_step[s].get(k, 0) for s in steps)]
                             for k, v in digest.labels.get(source, {}).items()]))
    return "".join(parts)


def _weights_section(digest: RunDigest) -> str:
    parts = ["<h2>A-Patch label weights over steps</h2>"]
    if not digest.label_weights:
        return parts[0] + "<p>No label weights were recorded (reweighting off?).</p>"
    steps = sorted(digest.label_weights)
    labels = sorted({lab for w in digest.label_weights.values() for lab in w})

    def draw(ax: Any) -> None:
        for number, label in enumerate(labels):
            xs = [s for s in steps if label in digest.label_weights[s]]
            ax.plot(xs, [digest.label_weights[s][label] for s in xs], label=label, **_style(number))
        for rev in digest.revisions:
            if rev.step is not None:
                ax.axvline(rev.step, color="grey", linestyle=":", linewidth=1)
        ax.set(title="label weights (dotted: interface revisions)", xlabel="step", ylabel="weight")
        _integer_steps(ax)
        _legend_below(ax, len(labels))

    parts.append(_img(_figure_png(draw), "A-Patch weights"))
    final = digest.final_label_weights()
    parts.append(
        _table(["label", f"weight after step {steps[-1]}"], [[k, f"{v:.3f}"] for k, v in sorted(final.items())])
    )
    return "".join(parts)


def _revisions_section(digest: RunDigest) -> str:
    parts = [f"<h2>Interface revisions ({len(digest.revisions)})</h2>"]
    for rev in digest.revisions:
        when = "before training" if rev.step is None else f"step {rev.step}"
        parent = "" if rev.parent is None else f", from r{rev.parent}"
        parts.append(f"<h3>r{rev.revision} ({when}{parent})</h3>")
        if rev.changes:
            parts.append("<ul>" + "".join(f"<li>{html.escape(c)}</li>" for c in rev.changes) + "</ul>")
        if rev.driven_by:
            parts.append(f"<p class=meta>driven by: {html.escape(', '.join(rev.driven_by))}</p>")
        if rev.diff and rev.parent is not None:
            parts.append(_diff_html(rev.diff))
    return "".join(parts)


def _step_seconds(digest: RunDigest, stage: str, step: int) -> float:
    """Seconds ``stage`` took at ``step``: from the step row, or from the run's stage_time events (set-up,
    evaluations; an evaluation "at step s" is the one after s steps, shown in the row of step s)."""
    row = next((s for s in digest.steps if s.step == step), None)
    return (row.timings.get(stage, 0.0) if row else 0.0) + digest.stage_times.get(stage, {}).get(step, 0.0)


def _timings_section(digest: RunDigest, transcripts: list[StepTranscripts] | None = None) -> str:
    parts = ["<h2>Stage timings</h2>"]
    totals = digest.stage_seconds()
    if not totals:
        return parts[0] + "<p>No stage was timed.</p>"
    stages = list(totals)
    grand = sum(totals.values())
    parts.append(_table(["stage", "seconds", "share"],
                        [[st, f"{v:.1f}", f"{100 * v / grand:.0f}%" if grand else "-"] for st, v in totals.items()]
                        + [["total", f"{grand:.1f}", ""]]))
    steps = sorted({s.step for s in digest.steps} | {st for v in digest.stage_times.values() for st in v})

    def draw(ax: Any) -> None:
        bottom = [0.0] * len(steps)
        for stage in stages:
            values = [_step_seconds(digest, stage, st) for st in steps]
            ax.bar(steps, values, bottom=bottom, label=stage)
            bottom = [b + v for b, v in zip(bottom, values)]
        ax.set(title="seconds per stage (set-up and the step-0 evaluation at step 0)", xlabel="step", ylabel="s")
        _integer_steps(ax)
        _legend_below(ax, len(stages))

    parts.append(_img(_figure_png(draw), "stage timings"))
    by_step = {s.step: s for s in digest.steps}
    rows = [[st, f"{by_step[st].mean_reward:.3f}" if st in by_step else "-",
             by_step[st].interface_revision if st in by_step else "-",
             *(f"{_step_seconds(digest, stage, st):.1f}" for stage in stages)] for st in steps]
    if transcripts:
        for row, st in zip(rows, steps):
            found = [
                x
                for x in (link(transcripts, "train", st, "rollouts"), link(transcripts, "eval", st, "evaluation"))
                if x
            ]
            row.append(_Raw(" ".join(found)) if found else "-")
    # A step's row holds the revision its interface evolution left (its own rollouts ran on the one before).
    parts.append(
        _table(["step", "reward", "interface after", *stages, *(["transcripts"] if transcripts else [])], rows)
    )
    return "".join(parts)


def _optimizer_section(digest: RunDigest, catalog: MetricCatalog) -> str:
    """The optimizers' headline metrics (role ``update``: GRPO's loss, grad norm, KL, entropy and clip fraction)
    over the steps that updated the policy; a step whose updates were all skipped has no such values (it is
    listed, not plotted as zeros)."""
    parts = ["<h2>Optimizer metrics over steps</h2>"]
    headline = catalog.headline()
    updated = [s for s in digest.steps if catalog.updated(s.metrics) and any(m.name in s.metrics for m in headline)]
    skipped = [s.step for s in digest.steps if s not in updated]
    shown = [(m.name, m.heading) for m in headline if any(m.name in s.metrics for s in updated)]
    if not updated or not shown:
        return parts[0] + "<p>No step updated the policy (or the optimizer recorded no metrics).</p>"

    def draw(axes: Any) -> None:
        for ax, (key, name) in zip(list(axes) if len(shown) > 1 else [axes], shown):
            xs = [s.step for s in updated if key in s.metrics]
            ax.plot(xs, [s.metrics[key] for s in updated if key in s.metrics], marker="o")
            ax.set(title=name, xlabel="step")
            _integer_steps(ax)

    parts.append(_img(_figure_png(draw, size=(3 * len(shown), 3), ncols=len(shown)), "optimizer metrics"))
    rows = [[s.step, *(f"{s.metrics[k]:.4g}" if k in s.metrics else "-" for k, _ in shown)] for s in updated]
    parts.append(_table(["step", *(name for _, name in shown)], rows))
    if skipped:
        parts.append(f"<p class=meta>steps without a policy update (nothing to learn or skipped): "
                     f"{', '.join(map(str, skipped))}</p>")
    return "".join(parts)


def _group_sections(digest: RunDigest, catalog: MetricCatalog) -> str:
    """One section per metric group (``MetricSpec.group``: the LLM judge's fallbacks, say) the run's steps
    have: what each member means, a plot of those ``plotted``, a table of every member per step, and the
    ``note`` of each member above 0 in some step."""
    parts = []
    for group, members in catalog.groups().items():
        steps = [s for s in digest.steps if any(m.name in s.metrics for m in members)]
        if not steps:
            continue
        title = group[:1].upper() + group[1:]
        meanings = "; ".join(f"{m.heading}: {m.description}" for m in members if m.description)
        parts.append(
            f"<h2>{html.escape(title)} per step</h2>" + (f"<p>{html.escape(meanings)}.</p>" if meanings else "")
        )
        for m in (m for m in members if m.plotted):
            points = [s for s in steps if m.name in s.metrics]
            if not points:
                continue

            def draw(ax: Any, m: MetricSpec = m, points: list[Any] = points) -> None:
                ax.plot([s.step for s in points], [(100 if m.percent else 1) * s.metrics[m.name] for s in points],
                        marker="o")
                ax.set(title=m.heading, xlabel="step")
                if m.percent:
                    _percent_axis(ax)
                _integer_steps(ax)

            parts.append(_img(_figure_png(draw, size=(9, 3)), m.heading))
        rows = [[s.step, *(m.text(s.metrics[m.name]) if m.name in s.metrics else "-" for m in members)] for s in steps]
        parts.append(_table(["step", *(m.heading for m in members)], rows))
        parts.extend(f"<p class=meta>{html.escape(m.note)}</p>" for m in members
                     if m.note and any(s.metrics.get(m.name, 0) > 0 for s in steps))
    return "".join(parts)


def _recipe_section(digest: RunDigest) -> str:
    """The resolved recipe the run ran with (defaults filled in), folded away."""
    if not digest.config:
        return "<h2>Recipe</h2><p>No resolved recipe was stored.</p>"
    import yaml

    text = yaml.safe_dump(digest.config, sort_keys=False, default_flow_style=False)
    return ("<h2>Recipe</h2><details><summary>resolved recipe (defaults filled in; "
            f"{len(text.splitlines())} lines)</summary><pre>{html.escape(text)}</pre></details>")


def _dynamic_sampling_section(digest: RunDigest) -> str:
    """Per step: groups drawn, kept (mixed outcomes), dropped; empty when the run did not use it."""
    totals = digest.dynamic_sampling()
    if totals is None:
        return ""
    rows: list[list[Any]] = [[s.step, *(int(s.metrics.get(k, 0.0)) for k in ds.METRICS)] for s in digest.steps
                             if ds.DRAWN in s.metrics]
    rows.append(["total", *(totals[k] for k in ("rounds", "drawn", "kept", "uniform", "surplus"))])
    return ("<h2>Dynamic sampling</h2><p>Groups collected per step, and which were trained on: only groups whose "
            "rewards differ carry a GRPO signal.</p>"
            + _table(["step", *(spec.heading for spec in ds.METRIC_SPECS)], rows))


def page(title: str, body: str) -> str:
    """A self-contained page: ``body`` (HTML, its text escaped by the caller) with the report's styles."""
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}{TRANSCRIPT_CSS}</style></head><body>{body}</body></html>")


def run_report_html(digest: RunDigest, transcripts: list[StepTranscripts] | None = None,
                    catalog: MetricCatalog | None = None) -> str:
    """The run's report; with ``transcripts`` (:func:`seal_platform.present.transcripts.report_transcripts`) it embeds
    them and links each evaluation and training step to its episodes. Metrics are shown as ``catalog`` declares
    them (default: the installed plugins' declarations)."""
    catalog = catalog_or_installed(catalog)
    meta = (f"<p class=meta>{html.escape(digest.status)}; recipe {html.escape(digest.recipe or '-')}; seed "
            f"{digest.seed}; started {digest.started_at}; ended {digest.ended_at or '-'}; {len(digest.steps)} "
            f"step(s); directory {html.escape(digest.run_dir)}</p>")
    error = f"<p><b>error:</b> {html.escape(digest.error)}</p>" if digest.error else ""
    body = "".join([
        f"<h1>run {html.escape(digest.id)} ({html.escape(digest.name)})</h1>", meta, error,
        _pass_rate_section(digest, transcripts), _optimizer_section(digest, catalog), _labels_section(digest),
        _group_sections(digest, catalog),
        _weights_section(digest),
        _revisions_section(digest), _timings_section(digest, transcripts), _dynamic_sampling_section(digest),
        _recipe_section(digest), transcripts_section(transcripts) if transcripts is not None else "",
    ])
    return page(f"seal-platform run {digest.id}", body)


def write_run_report(digest: RunDigest, out: Path | None = None,
                     transcripts: list[StepTranscripts] | None = None, catalog: MetricCatalog | None = None) -> Path:
    """Write the run's HTML report; returns its path. ``out``: a file, or a folder -- one that exists, or a name
    without a suffix, made if need be -- for ``report.html`` in it (a path the user named). Without ``out``:
    ``<run dir>/report.html``, for the run command only, which made that folder: the folder is not created
    here (a read command passes ``out``, never a path the store names: :func:`default_report_path`)."""
    if out is None:
        return write_page(digest.report_path, run_report_html(digest, transcripts, catalog), make_folder=False)
    path = Path(out)
    if path.is_dir() or not path.suffix:
        path = path / REPORT_FILE
    return write_page(path, run_report_html(digest, transcripts, catalog))


def default_report_path(run_id: str, folder: Path | None = None) -> Path:
    """Where ``seal-platform report RUN`` without ``--out`` writes: ``report-<run id>.html`` in the current
    directory (never the run folder the store names: a store from elsewhere names any path). The id is the
    store's, so only its letters, digits, ``.``, ``_`` and ``-`` make the name."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run_id)[:100].lstrip(".") or "run"
    return (folder or Path.cwd()) / f"report-{safe}.html"


def write_page(path: Path, text: str, *, make_folder: bool = True) -> Path:
    """Write a page to ``path`` without following a symbolic link: the text goes to a new temporary file in
    the same folder, which then replaces ``path`` (:func:`os.replace`), so a link or a file appearing there
    meanwhile is replaced, never written through; a ``path`` that is a symbolic link is refused. The folder is
    made only with ``make_folder`` (a path the user named). A path that cannot be written is a
    :class:`SealError` naming it and why, not a traceback."""
    import os
    import tempfile

    path = Path(path)
    folder = path.parent
    try:
        if path.is_symlink():
            raise SealError(f"cannot write {path}: it is a symbolic link (to {os.readlink(path)}), which is not "
                            "followed; give another path.")
        if path.is_dir():
            raise SealError(f"cannot write {path}: it is a folder; give a file path.")
        if make_folder:
            folder.mkdir(parents=True, exist_ok=True)
        elif not folder.is_dir():
            raise SealError(f"cannot write {path}: there is no folder {folder} (it is not created here); give "
                            "another path.")
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
        try:
            mask = os.umask(0)
            os.umask(mask)
            os.fchmod(fd, 0o666 & ~mask)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise SealError(f"cannot write {path}: {exc.strerror or exc}; give another path.") from None
    return path


def comparison_html(comparison: Comparison, digests: list[RunDigest]) -> str:
    header = ["set / category", *(f"{r.name} ({r.id})" for r in comparison.runs)]
    rows = [[f"{row.eval_set} / {row.category}", *(_pct(v) for v in row.values)] for row in comparison.rows]
    parts = ["<h1>Run comparison: final pass rate (%)</h1>", _table(header, rows)]
    for eval_set in sorted({row.eval_set for row in comparison.rows}):
        def draw(ax: Any, eval_set=eval_set) -> None:
            for number, d in enumerate(digests):
                points = d.evaluations.get(eval_set, [])
                if points:
                    ax.plot([p.step for p in points], [p.average for p in points], label=f"{d.name} {d.id[-6:]}",
                            **_style(number))
            ax.set(title=f"average pass rate on {eval_set}", xlabel="training steps done", ylabel="pass rate")
            _percent_axis(ax)
            _integer_steps(ax)
            _legend_below(ax, len(digests))

        parts.append(_img(_figure_png(draw), f"average pass rate on {eval_set}"))
    return page("seal-platform comparison", "".join(parts))
