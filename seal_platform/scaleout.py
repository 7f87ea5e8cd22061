"""What the core knows about scaling out: which executor runs the episodes, and recipe checks.

The core never imports Ray. It reads the recipe's generic ``ray:`` and ``rollout:`` keys, checks them
against what the loaded plugins register (``register_executors``), and builds the run's executor: the
built-in :class:`~seal_platform.executor.LocalExecutor` (``rollout.executor: local``, the default, which
never starts a cluster) or a plugin's (``rollout.executor: ray``, from the default ``ray_backend`` plugin).
Engine replicas and trainer workers are the business of the plugins that build engines and trainers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from .config import Issue, RunConfig
from .executor import Executor, LocalExecutor

if TYPE_CHECKING:  # pragma: no cover
    from .context import RunContext
    from .plugins import PluginHost

LOCAL = "local"


def check(config: RunConfig, host: PluginHost) -> list[Issue]:
    """Problems with the recipe's scale-out keys, reported with the others by ``check_recipe``."""
    issues: list[Issue] = []
    rollout = config.rollout
    if rollout.executor != LOCAL:
        executors = host.executors()
        if rollout.executor not in executors:
            known = ", ".join([LOCAL, *sorted(executors)])
            issues.append(Issue("rollout.executor", f"no loaded plugin registers executor {rollout.executor!r}",
                                f"registered executors: {known}"))
    if not config.ray.enabled:
        if rollout.replicas > 1:
            issues.append(Issue("rollout.replicas", "more than one engine replica runs on Ray",
                                "set ray.enabled: true (or give --ray-address), or rollout.replicas: 1"))
        if rollout.executor == "ray":
            issues.append(Issue("rollout.executor", "the ray executor needs Ray",
                                "set ray.enabled: true (or give --ray-address), or rollout.executor: local"))
    return issues


def build_executor(
    host: PluginHost, ctx: RunContext, on_progress: Callable[[int, int], None] | None = None
) -> Executor:
    """The executor ``rollout.executor`` names (checked by :func:`check` before)."""
    name = ctx.config.rollout.executor
    if name == LOCAL:
        return LocalExecutor(ctx.config.rollout.workers, on_progress=on_progress)
    _owner, spec = host.executors()[name]
    return spec.factory(ctx, on_progress)
