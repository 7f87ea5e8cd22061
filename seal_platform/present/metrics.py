"""How a run's step metrics are shown: the declarations (:class:`~seal_platform.registry.MetricSpec`) of the
core (dynamic sampling) and of every plugin's ``register_metrics``, read by ``show``, the summary, the
progress line and the report instead of any plugin's metric names.

A view is given a :class:`MetricCatalog` (the run's, :meth:`MetricCatalog.from_host`) or reads the installed
plugins' (:func:`installed_catalog`: a stored run is shown with the declarations of the plugins installed now).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from ..dynamic_sampling import METRIC_SPECS as CORE_SPECS
from ..registry import MetricSpec


class MetricCatalog:
    """The metric declarations a view reads: name -> spec (a name declared twice keeps its first), in order."""

    def __init__(self, specs: Iterable[MetricSpec] = ()):
        self.specs: dict[str, MetricSpec] = {}
        for spec in (*CORE_SPECS, *specs):
            self.specs.setdefault(spec.name, spec)

    @classmethod
    def from_host(cls, host: Any) -> MetricCatalog:
        """The declarations of the plugins of ``host`` (a :class:`~seal_platform.plugins.PluginHost`): what
        their ``register_metrics`` returned when the plugins were loaded
        (:meth:`~seal_platform.plugins.PluginHost.metric_specs`). A plugin whose hook raised or returned
        anything but a list of ``MetricSpec`` was failed there, as for every registration hook, and is not
        among them (its metrics are shown by name)."""
        return cls(host.metric_specs())

    def get(self, name: str) -> MetricSpec | None:
        return self.specs.get(name)

    def with_role(self, role: str) -> list[MetricSpec]:
        return [s for s in self.specs.values() if s.role == role]

    def name_of(self, role: str) -> str | None:
        """The first metric declared with ``role`` (None: none is)."""
        found = self.with_role(role)
        return found[0].name if found else None

    def value(self, metrics: Mapping[str, float], role: str, default: float = 0.0) -> float:
        """The step's value of the first metric with ``role`` it has (``default`` when it has none)."""
        for spec in self.with_role(role):
            if spec.name in metrics:
                return float(metrics[spec.name])
        return default

    def has(self, metrics: Mapping[str, float], role: str) -> bool:
        return any(spec.name in metrics for spec in self.with_role(role))

    def headline(self) -> list[MetricSpec]:
        """The optimizers' headline metrics (role ``update``), in declaration order."""
        return self.with_role("update")

    def updated(self, metrics: Mapping[str, float]) -> bool:
        """Whether the step updated the policy: its ``updates`` metric above 0 (a step without one: yes)."""
        return self.value(metrics, "updates", 1.0) > 0

    def total_updates(self, steps: Iterable[Mapping[str, float]]) -> int:
        return int(sum(self.value(m, "updates") for m in steps))

    def no_update_reason(self, metrics: Mapping[str, float]) -> str | None:
        """Why a step did not update, from the first declaration that explains it (None: none does)."""
        for spec in self.specs.values():
            if not spec.skip_reason or spec.role == "updates" or spec.name not in metrics:
                continue
            if spec.skipped(metrics) if spec.skipped is not None else metrics[spec.name] > 0:
                return spec.skip_reason
        return None

    def progress_reason(self, metrics: Mapping[str, float]) -> str | None:
        """The ``skip_reason`` of the step's ``updates`` metric when it is 0 (the progress line's "no update")."""
        for spec in self.with_role("updates"):
            if spec.name in metrics:
                return spec.skip_reason if metrics[spec.name] == 0 else None
        return None

    def groups(self) -> dict[str, list[MetricSpec]]:
        """Group -> its members, in declaration order."""
        out: dict[str, list[MetricSpec]] = {}
        for spec in self.specs.values():
            if spec.group:
                out.setdefault(spec.group, []).append(spec)
        return out

    def group_cell(self, group: str, metrics: Mapping[str, float]) -> str:
        """The text of ``group``'s column for a step: the first member's ``cell``, else each member's heading
        and value ("-" when the step has none of them)."""
        members = self.groups().get(group, [])
        if not any(s.name in metrics for s in members):
            return "-"
        for spec in members:
            if spec.cell is not None:
                return spec.cell(metrics)
        return ", ".join(f"{s.heading} {s.text(metrics[s.name])}" for s in members if s.name in metrics)

    def shown_apart(self) -> set[str]:
        """Metrics with a place of their own (a group's, dynamic sampling's): never in the generic column."""
        return {s.name for s in self.specs.values() if s.group} | {s.name for s in CORE_SPECS}


def _host_catalog(allow: str | None, block: str | None) -> MetricCatalog:
    del allow, block  # the cache key: make_plugin_manager reads them from the environment
    from ..errors import SealError
    from ..plugins import make_plugin_manager

    try:
        return MetricCatalog.from_host(make_plugin_manager())
    except SealError:
        return MetricCatalog()


_cached_catalog = lru_cache(maxsize=4)(_host_catalog)


def installed_catalog() -> MetricCatalog:
    """The declarations of the installed plugins (as ``$SEAL_PLATFORM_PLUGINS`` and
    ``$SEAL_PLATFORM_BLOCK_PLUGINS`` allow them), read once per process."""
    from ..plugins import ENV_ALLOW, ENV_BLOCK

    return _cached_catalog(os.environ.get(ENV_ALLOW), os.environ.get(ENV_BLOCK))


def catalog_or_installed(catalog: MetricCatalog | None) -> MetricCatalog:
    return catalog if catalog is not None else installed_catalog()
