"""The run context handed to every hook as ``ctx``."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from .config import RunConfig
from .errors import ConfigError
from .executor import Executor, LocalExecutor

if TYPE_CHECKING:  # pragma: no cover
    from .cluster import Cluster
    from .store import RunStore

M = TypeVar("M", bound=BaseModel)

log = logging.getLogger("seal_platform")


@dataclass
class RunContext:
    """What a hook needs to know about the run it serves.

    ``shared`` is for plugins of one run to hand objects to each other (the policy model to its engine,
    say); keys should be prefixed with the plugin's name.
    """

    config: RunConfig
    run_id: str
    run_dir: Path
    settings: dict[str, BaseModel] = field(default_factory=dict)
    store: RunStore | None = None
    shared: dict[str, Any] = field(default_factory=dict)
    # Episodes are submitted here (``ctx.executor.map(run_episode, episodes)``), never to threads of
    # a plugin's own, so a distributed executor can take over.
    executor: Executor = field(default_factory=LocalExecutor)
    # The compute cluster the recipe enables (``register_clusters``; Ray, say), or None: engine replicas and
    # trainer groups run on it through its typed contract (:class:`~seal_platform.registry.Cluster`).
    cluster: Cluster | None = None
    # The diagnosers this run enabled (names), set by the core from the plan: the recipe's
    # diagnosis.diagnosers (or every registered non-explicit one) that label the run's environment. A plugin
    # registering several diagnosers runs those of its own that are listed here.
    diagnosers: list[str] = field(default_factory=list)
    # Metrics of the training step under way from plugins other than the optimizer (see add_step_metrics).
    step_metrics: dict[str, float] = field(default_factory=dict)
    # Threads whose step metrics go elsewhere (an overlapped collect's, for the step it collects for).
    _metric_sinks: dict[int, dict[str, float]] = field(default_factory=dict, repr=False)

    @property
    def seed(self) -> int:
        return self.config.seed

    def settings_for(self, section: str, model: type[M] | None = None) -> M:
        """The validated settings section ``section`` (the plugin's own, usually)."""
        try:
            value = self.settings[section]
        except KeyError:
            if model is not None:
                value = self.settings[section] = model()
                return value  # type: ignore[return-value]
            raise ConfigError(f"no settings section {section!r}: is the plugin that owns it loaded?") from None
        if model is not None and not isinstance(value, model):
            raise ConfigError(f"settings section {section!r} is a {type(value).__name__}, not {model.__name__}")
        return value  # type: ignore[return-value]

    def add_step_metrics(self, **metrics: float) -> None:
        """Record metrics of the training step under way (a diagnoser's rates, say) with the step's own: they
        are stored in the step row's metrics next to the optimizer's, shown by ``show`` and the report and
        handed to trackers. Called from a hook of the step (``collect`` .. ``optimize``); a name the optimizer
        also returns is overwritten by the optimizer's value. With ``rollout.overlap``, what a ``collect``
        running in the background adds from its own thread goes to the step it collects for."""
        sink = self._metric_sinks.get(threading.get_ident(), self.step_metrics)
        sink.update({k: float(v) for k, v in metrics.items()})

    def redirect_step_metrics(self, sink: dict[str, float] | None) -> None:
        """Send this thread's :meth:`add_step_metrics` to ``sink`` (None: back to the step under way); the
        core's, for overlapped rollouts (:mod:`seal_platform.rollouts`)."""
        if sink is None:
            self._metric_sinks.pop(threading.get_ident(), None)
        else:
            self._metric_sinks[threading.get_ident()] = sink

    def take_step_metrics(self) -> dict[str, float]:
        """The metrics recorded since the last call (the loop takes them once per step)."""
        taken, self.step_metrics = self.step_metrics, {}
        return taken

    def event(self, kind: str, message: str, **data: Any) -> None:
        """Record something worth knowing later (a retry, a skipped plugin, a recovered error)."""
        log.info("%s: %s", kind, message)
        if self.store is not None:
            self.store.add_event(self.run_id, kind, message, data)
