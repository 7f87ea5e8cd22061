"""What setup hooks return: named things a plugin provides, and the factories that build them."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .cluster import Cluster

if TYPE_CHECKING:  # pragma: no cover
    from pydantic import BaseModel

    from .config import RunConfig
    from .context import RunContext
    from .engine import RolloutEngine
    from .environment import Environment
    from .executor import Executor


@dataclass(frozen=True)
class EnvironmentSpec:
    """An environment (benchmark). ``factory(ctx)`` builds it; heavy imports belong inside the factory.

    ``splits`` declares the task splits the environment has, so that a recipe asking for another one (its
    ``evaluation.split``, a benchmark's ``split``, or training on an environment without a ``train`` split)
    is refused with the recipe's other problems (``config validate``, ``run``, ``eval``), before a run's row
    is written or anything is loaded: a tuple of names, or ``splits(settings)`` (every enabled plugin's
    validated settings section, by name) for splits that depend on the settings, such as a task file's.
    The callable must be cheap (no server, no download) and returns None where it cannot tell (a task file
    that is not there); None (the default): not declared, and a bad split is refused only when the run
    lists its tasks, after its row is written (``tasks`` raising, naming the splits it has). A task file it
    reads that cannot be used (not UTF-8, a line that is no task, a repeated id) is best raised here as a
    :class:`~seal_platform.errors.ConfigError` naming the file and line: it is reported with the recipe's
    other problems, before a run's row exists (any other exception is reported as the plugin's bug).
    """

    name: str
    factory: Callable[[RunContext], Environment]
    description: str = ""
    splits: tuple[str, ...] | Callable[[dict[str, BaseModel]], Collection[str] | None] | None = None

    def declared_splits(self, settings: dict[str, BaseModel]) -> list[str] | None:
        """The splits ``splits`` declares under ``settings``, sorted; None where it declares none."""
        found = self.splits(settings) if callable(self.splits) else self.splits
        if found is None:
            return None
        return [found] if isinstance(found, str) else sorted(set(found))


@dataclass(frozen=True)
class DiagnoserSpec:
    """A diagnoser; the plugin registering it implements the ``diagnose`` hook.

    ``labels`` is its label set; ``reference`` maps each finer label to the reference label(s) it refines
    (``TurnLabel.reference_label`` of a turn names the one that applies; A-Patch's base weights are per
    reference label); ``meanings`` says what each label means; ``environments`` lists the environments it
    labels (empty: any). ``seal-platform labels [ENV]`` shows all of it.

    The core enforces ``environments``: a diagnoser is called only in runs whose environment it labels. A
    recipe that names it in ``diagnosis.diagnosers`` for a run of another environment is refused (``config
    validate`` and ``run`` name it and the environments it labels); one enabled by default (the list null) is
    left out quietly, unless no enabled diagnoser labels the run's environment while the recipe's stages work
    from labels (``stages.evolve_interface``, ``stages.reweight``), which is refused too, so a misspelt name in
    ``environments`` shows up. ``explicit`` diagnosers (controls, or a costly one such as the LLM judge) run only
    when the recipe names them in ``diagnosis.diagnosers``; ``null`` there enables every other one. The
    names the run enabled reach the plugins as ``ctx.diagnosers``.
    """

    name: str
    description: str = ""
    labels: tuple[str, ...] = ()
    reference: dict[str, tuple[str, ...]] = field(default_factory=dict)
    meanings: dict[str, str] = field(default_factory=dict)
    environments: tuple[str, ...] = ()
    explicit: bool = False

    def labels_environment(self, environment: str) -> bool:
        """Whether this diagnoser labels runs of ``environment`` (``environments`` empty: every one)."""
        return not self.environments or environment in self.environments


@dataclass(frozen=True)
class EngineSpec:
    """A rollout engine. ``factory(ctx)`` builds it; heavy imports belong inside the factory."""

    name: str
    factory: Callable[[RunContext], RolloutEngine]
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ExecutorSpec:
    """Where episodes run (``rollout.executor``). ``factory(ctx, on_progress)`` builds an
    :class:`~seal_platform.executor.Executor`; ``on_progress(done, total)`` may be None. Heavy imports (ray)
    belong inside the factory; starting a cluster should wait for the first ``map``."""

    name: str
    factory: Callable[[RunContext, Callable[[int, int], None] | None], Executor]
    description: str = ""
    cluster: str | None = None  # the registered cluster it runs on (it must be enabled by the recipe), if any


@dataclass(frozen=True)
class ClusterSpec:
    """A compute cluster (``register_clusters``). ``factory(config, settings)`` returns the cluster the recipe
    enables in its plugin's settings, or None when the recipe does not use it; it must not connect (the users'
    ``acquire`` does). At most one registered cluster may be enabled by a recipe. ``enable`` says how a recipe
    turns it on (shown by the errors of users that need it)."""

    name: str
    factory: Callable[[RunConfig, dict[str, BaseModel]], Cluster | None]
    description: str = ""
    enable: str = ""


#: What a step metric can stand for (:attr:`MetricSpec.role`); the run's output reads these, never a name.
METRIC_ROLES = {
    "update": "a headline metric of an optimizer update (a loss, a gradient norm): shown in `show`'s metrics "
              "column and plotted by the report, in declaration order, for the steps that updated the policy",
    "updates": "the number of optimizer updates the step made: 0 means the step did not update the policy "
               "(a step without this metric counts as updated); summed into the summary's and report's "
               "\"policy updates\"",
    "trained_sequences": "sequences (trajectories) the update trained on",
    "skipped_sequences": "sequences the update left out (its description says why, in the summary)",
    "trained_tokens": "tokens the update trained on; a run with this metric gets the summary's update line",
    "update_seconds": "seconds the update took (with trained_tokens: the summary's trained tokens/s)",
    "tokens_per_s": "the step's update throughput (trained tokens per second), shown on the progress line",
}


@dataclass(frozen=True)
class MetricSpec:
    """How one step metric a plugin records (``optimize``'s result, ``ctx.add_step_metrics``) is shown by
    ``show``, the end-of-run summary, the progress line and the HTML report (``register_metrics``).

    ``description`` says what it measures; ``label`` is its short heading (report tables and plots; default
    the name); ``format`` its number format (``format(value, spec.format)``); ``percent``: a fraction shown
    as a percentage. ``role`` (a key of :data:`METRIC_ROLES`, or ""): what it stands for, so that the output
    counts any optimizer's updates, trained tokens and headline metrics, not one plugin's names.

    ``skip_reason``: why a step did not update the policy, in a few words, when this metric says so. For the
    ``updates`` metric it is said whenever the count is 0 (the progress line: "no update (<reason>)"); for
    any other, ``show`` says "skipped (<reason>)" for a step without an update when ``skipped(metrics)`` is
    true (default: the metric is above 0); the first declaration that applies wins.

    ``group``: metrics shown apart, together: one column of ``show``'s steps table headed by the group, its
    cell ``cell(metrics)`` of the first member that has one (default: each member's label and value), and
    one section of the report (a table of the members, a plot of those ``plotted``, and the ``note`` of any
    member above 0 in some step). A grouped metric is never in the generic metrics column.
    """

    name: str
    description: str = ""
    label: str = ""
    role: str = ""
    format: str = ".4g"
    percent: bool = False
    skip_reason: str = ""
    skipped: Callable[[Mapping[str, float]], bool] | None = None
    group: str = ""
    cell: Callable[[Mapping[str, float]], str] | None = None
    plotted: bool = False
    note: str = ""

    def __post_init__(self) -> None:
        if self.role and self.role not in METRIC_ROLES:
            raise ValueError(f"metric {self.name!r}: unknown role {self.role!r}; one of {', '.join(METRIC_ROLES)}")

    @property
    def heading(self) -> str:
        """The short heading: ``label``, else the name."""
        return self.label or self.name

    def text(self, value: float) -> str:
        """``value`` as this metric is shown."""
        return f"{100 * value:.0f}%" if self.percent else format(value, self.format)


__all__ = ["METRIC_ROLES", "Cluster", "ClusterSpec", "DiagnoserSpec", "EngineSpec", "EnvironmentSpec", "ExecutorSpec",
           "MetricSpec"]
