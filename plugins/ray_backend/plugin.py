"""Hook implementations of the ray_backend plugin (``ray`` is imported only inside the factories).

Owns the ``settings.ray`` section (:class:`~.settings.RaySettings`) and registers:

* the ``ray`` cluster (``register_clusters``): with ``settings.ray.enabled`` the run's ``ctx.cluster`` is a
  :class:`~.cluster.RayCluster`, through which other plugins run their parts on Ray (grpo: engine replicas and
  trainer workers) without importing this one;
* the ``ray`` executor (``rollout.executor: ray``): environment episodes run in Ray actors, an episode lost to
  the infrastructure (its actor or node died, it ran past ``rollout.episode_timeout_s``) becomes an
  ``infra_failure`` trajectory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from seal_platform.hookspecs import hookimpl
from seal_platform.registry import ClusterSpec, ExecutorSpec

from .settings import RaySettings

SECTION = "ray"


@hookimpl
def register_settings() -> dict[str, type]:
    return {SECTION: RaySettings}


def _ray_cluster(config: Any, settings: dict[str, Any]) -> Any:
    from .cluster import RayCluster

    ray = settings.get(SECTION) or RaySettings()
    return RayCluster(ray) if ray.enabled else None


@hookimpl
def register_clusters() -> list[ClusterSpec]:
    return [ClusterSpec("ray", _ray_cluster, "Ray: a local one, or join settings.ray.address",
                        enable="set settings.ray.enabled: true (settings.ray.address: join an existing cluster)")]


def _ray_executor(ctx: Any, on_progress: Callable[[int, int], None] | None) -> Any:
    from .executor import RayExecutor

    rollout = ctx.config.rollout
    return RayExecutor(ctx.settings_for(SECTION, RaySettings), workers=rollout.workers,
                       episode_timeout_s=rollout.episode_timeout_s, on_progress=on_progress)


@hookimpl
def register_executors() -> list[ExecutorSpec]:
    return [ExecutorSpec("ray", _ray_executor, "episodes in Ray actors (settings.ray: local Ray or join an "
                         "address); infra failures masked", cluster="ray")]
