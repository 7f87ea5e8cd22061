"""grpo on the run's Ray cluster: leases, and the placement groups of its engine replicas and trainer workers.

The cluster is the run's ``ctx.cluster`` when the recipe enables Ray (``settings.ray.enabled``, the
ray_backend plugin's section), used through the core's typed contract
(:class:`seal_platform.registry.Cluster`: ``acquire``/``release`` leases, ``infra_errors``); grpo never
imports the plugin that registered it. Where the actors go is grpo's own ``grpo.placement`` section.
"""

from __future__ import annotations

import os
import threading
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .settings import PlacementSettings

if TYPE_CHECKING:  # pragma: no cover
    from seal_platform.registry import Cluster

RAY = "ray"  # the registered name of the cluster grpo's actors run on

_lock = threading.Lock()
_leases = 0
_colocated: tuple[Any, list[Any]] | None = None  # (placement group, strategies) shared by trainers and engines


@dataclass(frozen=True)
class OnRay:
    """The run's Ray cluster and where grpo places its actors on it. Picklable (episode actors get it with
    the engine client)."""

    cluster: Cluster
    placement: PlacementSettings


def on_ray(cluster: Cluster | None, placement: PlacementSettings) -> OnRay | None:
    """``OnRay`` when the run's cluster is Ray, else None (grpo's engines and trainers stay in this process)."""
    return OnRay(cluster, placement) if cluster is not None and cluster.name == RAY else None


def acquire(ray: OnRay) -> None:
    """Take a lease on the cluster (connecting this process on the first)."""
    global _leases
    ray.cluster.acquire()
    with _lock:
        _leases += 1


def release(ray: OnRay) -> None:
    """Give a lease back; the last of grpo's removes the shared (colocated) placement group."""
    global _leases, _colocated
    with _lock:
        _leases = max(0, _leases - 1)
        group = _colocated[0] if _leases == 0 and _colocated is not None else None
        if _leases == 0:
            _colocated = None
    if group is not None:
        try:
            import ray as ray_api

            if ray_api.is_initialized():
                ray_api.util.remove_placement_group(group)
        except Exception:  # the cluster is going away anyway
            pass
    ray.cluster.release()


def infra_errors(ray: OnRay) -> tuple[type[BaseException], ...]:
    """The cluster's exceptions that mean the infrastructure, not the code, failed a call."""
    return ray.cluster.infra_errors()


def placement(ray: OnRay, bundles: list[dict[str, float]], name: str) -> tuple[list[Any], Any]:
    """A placement group of ``bundles`` (strategy ``grpo.placement.strategy``), ready: one scheduling
    strategy per bundle, in order, and the group."""
    import ray as ray_api
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    strategy = ray.placement.strategy
    cleaned = [{k: v for k, v in b.items() if v > 0} or {"CPU": 0.01} for b in bundles]
    group = placement_group(cleaned, strategy=strategy, name=name)
    try:
        ray_api.get(group.ready(), timeout=120)
    except Exception as exc:
        ray_api.util.remove_placement_group(group)
        raise RuntimeError(
            f"Ray could not place {len(cleaned)} bundle(s) {cleaned[0]} with strategy {strategy} "
            f"within 120 s ({type(exc).__name__}): the cluster lacks the resources; lower settings.grpo.replicas or "
            "settings.grpo.placement.engine_cpus / engine_gpus, or add nodes."
        ) from None
    return [PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=i)
            for i in range(len(cleaned))], group


def colocated(ray: OnRay, n: int) -> list[Any]:
    """Scheduling strategies for ``n`` actors in the one placement group trainer workers and engine replicas
    share (``grpo.placement.colocate``). The first caller creates it with ``n`` bundles of
    ``trainer_cpus + engine_cpus`` CPUs and ``trainer_gpus + engine_gpus`` GPUs; a later caller asking for more
    actors than bundles places them round robin (actor i in bundle i mod the bundle count)."""
    global _colocated
    p = ray.placement
    with _lock:
        if _colocated is None:
            bundle = {"CPU": p.trainer_cpus + p.engine_cpus, "GPU": p.trainer_gpus + p.engine_gpus}
            strategies, group = placement(
                ray, [bundle] * n, name=f"seal-colocated-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            )
            _colocated = (group, strategies)
        strategies = _colocated[1]
    return [strategies[i % len(strategies)] for i in range(n)]
