"""A run read back from the store as one typed object: what the end-of-run summary, ``show --json``,
``report`` and ``compare`` print or plot.

Evaluation results are keyed by *evaluation set* (``<benchmark>:<split>``, the benchmark being the run's own
environment or one of ``evaluation.benchmarks``), so a run evaluated on several benchmarks or splits carries
several sets and ``compare`` shows each as its own block of rows.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, computed_field

from .. import dynamic_sampling as ds
from ..recipe_secrets import redact_config
from ..store.models import EVAL_BY_COMMAND
from .metrics import MetricCatalog, catalog_or_installed

LOG_FILE = "run.log"
REPORT_FILE = "report.html"
STAGES = ("collect", "diagnose", "evolve_interface", "reweight", "optimize")


class EvalPoint(BaseModel):
    """One evaluation of one evaluation set after ``step`` training steps."""

    step: int
    per_category: dict[str, float]
    n_tasks: int = 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def average(self) -> float:
        """The pass rate (%) averaged over categories: the run's headline number."""
        return sum(self.per_category.values()) / len(self.per_category) if self.per_category else 0.0


class CheckpointEvaluation(BaseModel):
    """One ``seal-platform eval`` of a checkpoint, kept apart from the run's own evaluations (:class:`EvalPoint`):
    it may use another split or task count, and it is run after the fact."""

    after_steps: int = Field(description="the checkpoint evaluated holds this many training steps (the one "
                                         "`show` lists as `step {after_steps - 1}`)")
    eval_set: str
    per_category: dict[str, float]
    n_tasks: int = 0
    at: datetime | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def average(self) -> float:
        """The pass rate (%) averaged over categories."""
        return sum(self.per_category.values()) / len(self.per_category) if self.per_category else 0.0


class Revision(BaseModel):
    revision: int
    parent: int | None = None
    step: int | None = None
    changes: list[str] = Field(default_factory=list)
    driven_by: list[str] = Field(default_factory=list)
    diff: str = ""


class StepPoint(BaseModel):
    step: int
    mean_reward: float
    interface_revision: int
    metrics: dict[str, float] = Field(default_factory=dict)
    timings: dict[str, float] = Field(default_factory=dict)


class EventPoint(BaseModel):
    """One event of the run as the store holds it (``data``: a crash's ``traceback``, a stage's ``seconds``,
    the plugin a failure names)."""

    at: datetime | None = None
    kind: str
    message: str = ""
    data: dict[str, Any] = Field(default_factory=dict)


class RunDigest(BaseModel):
    """Everything the summary, report and comparison need from one run."""

    id: str
    name: str
    status: str
    recipe: str = ""
    environment: str = ""
    seed: int = 0
    started_at: datetime | None = None
    ended_at: datetime | None = None
    run_dir: str = ""
    error: str | None = None
    evaluations: dict[str, list[EvalPoint]] = Field(default_factory=dict, description="eval set -> points by step")
    checkpoint_evaluations: list[CheckpointEvaluation] = Field(
        default_factory=list, description="`seal-platform eval` results, oldest first (not in `evaluations`)")
    steps: list[StepPoint] = Field(default_factory=list)
    labels: dict[str, dict[str, int]] = Field(default_factory=dict, description="diagnoser -> label -> turns")
    labels_per_step: dict[str, dict[int, dict[str, int]]] = Field(
        default_factory=dict, description="diagnoser -> step -> label -> turns"
    )
    label_weights: dict[int, dict[str, float]] = Field(default_factory=dict, description="step -> label -> weight")
    revisions: list[Revision] = Field(default_factory=list)
    config: dict[str, Any] = Field(default_factory=dict, description="the resolved recipe the run ran with")
    stage_times: dict[str, dict[int, float]] = Field(
        default_factory=dict, description="stage -> step -> seconds, for stages the step rows do not time "
        "(setup, evaluate; from the run's stage_time events)"
    )
    events: list[EventPoint] = Field(default_factory=list, description="the run's events, oldest first, with "
                                     "their data (a crash event's holds its traceback)")

    # --- derived -------------------------------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        return Path(self.run_dir) / LOG_FILE

    @property
    def report_path(self) -> Path:
        return Path(self.run_dir) / REPORT_FILE

    def stage_seconds(self) -> dict[str, float]:
        """Seconds spent per stage over all steps (in loop order, then any others)."""
        totals: dict[str, float] = defaultdict(float)
        for step in self.steps:
            for stage, seconds in step.timings.items():
                totals[stage] += float(seconds)
        for stage, per_step in self.stage_times.items():
            totals[stage] += sum(per_step.values())
        order = ([s for s in ("setup", *STAGES, "evaluate") if s in totals]
                 + sorted(s for s in totals if s not in STAGES and s not in ("setup", "evaluate")))
        return {s: totals[s] for s in order}

    def first_and_last(self, eval_set: str) -> tuple[EvalPoint | None, EvalPoint | None]:
        points = self.evaluations.get(eval_set, [])
        if not points:
            return None, None
        return points[0], points[-1]

    def final_scores(self) -> dict[str, dict[str, float]]:
        """eval set -> category -> pass rate of the last evaluation (plus ``average``)."""
        out: dict[str, dict[str, float]] = {}
        for eval_set, points in self.evaluations.items():
            last = points[-1]
            out[eval_set] = {**last.per_category, "average": last.average}
        return out

    def final_label_weights(self) -> dict[str, float]:
        return self.label_weights[max(self.label_weights)] if self.label_weights else {}

    def dynamic_sampling(self) -> dict[str, int] | None:
        """Dynamic-sampling counts summed over the steps (``drawn``, ``kept``, ``uniform``, ``surplus``,
        ``rounds``), or None when the run did not use it."""
        steps = [s for s in self.steps if ds.DRAWN in s.metrics]
        if not steps:
            return None
        keys = {"rounds": ds.ROUNDS, "drawn": ds.DRAWN, "kept": ds.KEPT, "uniform": ds.UNIFORM, "surplus": ds.SURPLUS}
        return {k: int(sum(s.metrics.get(m, 0.0) for s in steps)) for k, m in keys.items()}

    def updates(self, catalog: MetricCatalog | None = None) -> int:
        """Optimizer updates over the run: the sum of the steps' ``updates`` metric (the role a plugin declares,
        :mod:`.metrics`; default the installed plugins' declarations)."""
        return catalog_or_installed(catalog).total_updates(s.metrics for s in self.steps)

    def tokens_per_s(self, catalog: MetricCatalog | None = None) -> float | None:
        """Mean update throughput over the steps that trained anything (trained tokens / update seconds)."""
        catalog = catalog_or_installed(catalog)
        tokens = sum(catalog.value(s.metrics, "trained_tokens") for s in self.steps)
        seconds = sum(catalog.value(s.metrics, "update_seconds") for s in self.steps
                      if catalog.value(s.metrics, "trained_tokens"))
        return tokens / seconds if seconds > 0 else None


def _float_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in (metrics or {}).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def benchmark_of(row: Any, environment: str) -> str:
    """The benchmark an evaluation row belongs to: its own name, or the run's environment for the run's own
    evaluations (and for rows stored before benchmarks were recorded)."""
    return row.benchmark or environment


def eval_set_of(row: Any, environment: str) -> str:
    """The evaluation set (``<benchmark>:<split>``) an evaluation row belongs to."""
    bench = benchmark_of(row, environment)
    return f"{bench}:{row.split}" if bench else row.split


def checkpoint_evaluations(store: Any, run_id: str, environment: str) -> list[CheckpointEvaluation]:
    """The ``seal-platform eval`` results of a run, one per command (its rows are written together: a new one
    starts where the step, the set or a category repeats)."""
    out: list[CheckpointEvaluation] = []
    for row in sorted(store.evaluations(run_id, origin=EVAL_BY_COMMAND), key=lambda r: r.id):
        eval_set, last = eval_set_of(row, environment), out[-1] if out else None
        if (last is None or last.after_steps != row.step or last.eval_set != eval_set
                or row.category in last.per_category):
            last = CheckpointEvaluation(after_steps=row.step, eval_set=eval_set, per_category={},
                                        n_tasks=int(row.n_tasks), at=row.created_at)
            out.append(last)
        last.per_category[row.category] = float(row.pass_rate)
    return out


def load_digest(store: Any, run_id: str) -> RunDigest:
    """Read one run (``run_id`` may be a unique prefix, as the store accepts) into a :class:`RunDigest`."""
    run = store.get_run(run_id)
    environment = str((run.config or {}).get("environment", ""))
    evaluations: dict[str, dict[int, EvalPoint]] = defaultdict(dict)
    for row in store.evaluations(run.id):
        point = evaluations[eval_set_of(row, environment)].setdefault(
            row.step, EvalPoint(step=row.step, per_category={})
        )
        point.per_category[row.category] = float(row.pass_rate)
        point.n_tasks = max(point.n_tasks, int(row.n_tasks))  # each category's row holds the evaluation's count
    labels: dict[str, Counter] = defaultdict(Counter)
    per_step: dict[str, dict[int, Counter]] = defaultdict(lambda: defaultdict(Counter))
    for row in store.labels(run.id):
        labels[row.source][row.label] += 1
        per_step[row.source][row.step][row.label] += 1
    stage_times: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    events = []
    for event in store.events(run.id):
        data = event.data or {}
        events.append(EventPoint(at=event.at, kind=event.kind, message=event.message or "",
                                 data=data if isinstance(data, dict) else {"value": data}))
        if event.kind == "stage_time" and isinstance(data.get("seconds"), (int, float)):
            stage_times[str(data.get("stage", "?"))][int(data.get("step", 0))] += float(data["seconds"])
    weights: dict[int, dict[str, float]] = defaultdict(dict)
    for row in store.label_weights(run.id):
        weights[row.step][row.label] = float(row.weight)
    return RunDigest(
        id=run.id,
        name=run.name,
        status=run.status,
        recipe=run.recipe or "",
        environment=environment,
        seed=run.seed,
        started_at=run.started_at,
        ended_at=run.ended_at,
        run_dir=run.run_dir,
        error=run.error,
        evaluations={k: [v[s] for s in sorted(v)] for k, v in sorted(evaluations.items())},
        checkpoint_evaluations=checkpoint_evaluations(store, run.id, environment),
        steps=[
            StepPoint(
                step=s.step,
                mean_reward=s.mean_reward,
                interface_revision=s.interface_revision,
                metrics=_float_metrics(s.metrics),
                timings=_float_metrics(s.timings),
            )
            for s in store.steps(run.id)
        ],
        labels={src: dict(c.most_common()) for src, c in sorted(labels.items())},
        labels_per_step={
            src: {step: dict(c) for step, c in sorted(steps.items())} for src, steps in sorted(per_step.items())
        },
        label_weights=dict(sorted(weights.items())),
        config=redact_config(dict(run.config or {})),  # a run stored before secrets were redacted too
        stage_times={stage: dict(sorted(v.items())) for stage, v in stage_times.items()},
        events=events,
        revisions=[
            Revision(
                revision=r.revision,
                parent=r.parent,
                step=r.step,
                changes=list(r.changes or []),
                driven_by=list(r.driven_by or []),
                diff=r.diff or "",
            )
            for r in store.interfaces(run.id)
        ],
    )
