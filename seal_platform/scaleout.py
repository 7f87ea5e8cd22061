"""What the core knows about scaling out: which cluster and executor the recipe uses, and their checks.

The core names no backend and never imports one. Plugins register compute clusters (``register_clusters``,
e.g. ``ray`` from the ``ray_backend`` plugin, enabled by its own settings section) and executors
(``register_executors``). The core finds the one cluster the recipe enables (:func:`cluster_for`), checks
``rollout.executor`` against the registered executors and the cluster each needs, and builds the run's
executor: the built-in :class:`~seal_platform.executor.LocalExecutor` (``rollout.executor: local``, the default,
which never starts a cluster) or a plugin's. Engine replicas and trainer workers are the business of the
plugins that build engines and trainers; they reach the cluster as ``ctx.cluster``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .config import Issue, RunConfig
from .errors import ConfigError
from .executor import Executor, LocalExecutor

if TYPE_CHECKING:  # pragma: no cover
    from .context import RunContext
    from .plugins import PluginHost
    from .registry import Cluster

LOCAL = "local"


def cluster_for(host: PluginHost, config: RunConfig, settings: dict[str, Any]) -> Cluster | None:
    """The registered cluster the recipe enables (in its plugin's settings), or None; more than one is an
    error."""
    enabled = [(name, found) for name, (_owner, spec) in sorted(host.clusters().items())
               if (found := spec.factory(config, settings)) is not None]
    if len(enabled) > 1:
        names = ", ".join(name for name, _ in enabled)
        raise ConfigError(f"the recipe enables {len(enabled)} clusters ({names}); a run uses at most one: "
                          "switch all but one off in their plugins' settings.")
    return enabled[0][1] if enabled else None


def check(config: RunConfig, host: PluginHost, settings: dict[str, Any] | None = None) -> list[Issue]:
    """Problems with the recipe's scale-out keys, reported with the others by ``check_recipe``."""
    issues: list[Issue] = []
    rollout = config.rollout
    if rollout.executor == LOCAL:
        return issues
    problem = host.missing("executor", rollout.executor, builtin=(LOCAL,))
    if problem is not None:
        return [*issues, Issue("rollout.executor", *problem)]
    executors = host.executors()
    needs = executors[rollout.executor][1].cluster
    if needs is not None:
        try:
            cluster = cluster_for(host, config, settings or {})
        except ConfigError as exc:
            return [*issues, Issue("settings", str(exc))]
        if cluster is None or cluster.name != needs:
            spec = host.clusters().get(needs)
            how = spec[1].enable if spec is not None and spec[1].enable else f"enable the {needs} cluster"
            issues.append(Issue("rollout.executor", f"the {rollout.executor} executor runs on the {needs} cluster",
                                f"{how}, or rollout.executor: local"))
    return issues


def build_executor(
    host: PluginHost, ctx: RunContext, on_progress: Callable[[int, int], None] | None = None
) -> Executor:
    """The executor ``rollout.executor`` names (checked by :func:`check` before). Sets ``ctx.cluster`` (the
    cluster the recipe enables, or None) first: the executor and later the engines and trainers use it."""
    ctx.cluster = cluster_for(host, ctx.config, ctx.settings)
    name = ctx.config.rollout.executor
    if name == LOCAL:
        return LocalExecutor(ctx.config.rollout.workers, on_progress=on_progress)
    _owner, spec = host.executors()[name]
    return spec.factory(ctx, on_progress)
