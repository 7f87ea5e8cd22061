"""What setup hooks return: named things a plugin provides, and the factories that build them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

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
    """An environment (benchmark). ``factory(ctx)`` builds it; heavy imports belong inside the factory."""

    name: str
    factory: Callable[[RunContext], Environment]
    description: str = ""


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


__all__ = ["Cluster", "ClusterSpec", "DiagnoserSpec", "EngineSpec", "EnvironmentSpec", "ExecutorSpec"]
