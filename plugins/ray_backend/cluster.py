"""Connecting to Ray: join ``ray.address`` or start a local Ray, once per process, shared by every user.

Each user (the executor, the engine replicas, trainer workers) takes a lease with :func:`acquire` and gives
it back with :func:`release`; a Ray this process started is shut down when the last lease is given back, a
cluster it joined is only disconnected from. A locally started Ray gets the driver's ``sys.path`` as its
workers' ``PYTHONPATH``, so whatever the driver can import (editable installs, test helpers) they can too;
on a real cluster install the same packages on every node (docs/scaling.md).
"""

from __future__ import annotations

import os
import uuid
import sys
import threading
from typing import Any

_lock = threading.Lock()
_leases = 0
_started_here = False
_colocated: tuple[Any, list[Any]] | None = None  # (placement group, strategies) shared by trainers and engines


def acquire(config: Any) -> None:
    """Make sure this process is connected to Ray as ``config`` (the recipe's ``ray`` section) says."""
    global _leases, _started_here
    import ray

    with _lock:
        if not ray.is_initialized():
            kwargs: dict[str, Any] = dict(namespace=config.namespace, ignore_reinit_error=True,
                                          log_to_driver=False, configure_logging=False)
            if config.address:
                ray.init(address=config.address, **kwargs)
                _started_here = False
            else:
                paths = [p for p in sys.path if p and os.path.isdir(p)]
                ray.init(num_cpus=config.num_cpus or max(8, os.cpu_count() or 1), include_dashboard=False,
                         runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(paths)}}, **kwargs)
                _started_here = True
        _leases += 1


def release() -> None:
    """Give a lease back; the last one shuts down a Ray this process started (or disconnects)."""
    global _leases
    import ray

    global _colocated
    with _lock:
        _leases = max(0, _leases - 1)
        if _leases == 0 and ray.is_initialized():
            _colocated = None
            ray.shutdown()


def infra_errors() -> tuple[type[BaseException], ...]:
    """Ray's exceptions that mean the infrastructure, not the code, failed a call."""
    from ray import exceptions as rx

    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError", "NodeDiedError",
             "ObjectLostError", "OwnerDiedError", "LocalRayletDiedError", "ObjectFetchTimedOutError",
             "ReferenceCountingAssertionError", "OutOfMemoryError")
    return tuple(getattr(rx, n) for n in names if isinstance(getattr(rx, n, None), type))


def placement(config: Any, bundles: list[dict[str, float]], name: str) -> tuple[list[Any], Any]:
    """A placement group of ``bundles`` (strategy ``ray.placement_strategy``), ready: one scheduling
    strategy per bundle, in order, and the group."""
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    cleaned = [{k: v for k, v in b.items() if v > 0} or {"CPU": 0.01} for b in bundles]
    group = placement_group(cleaned, strategy=config.placement_strategy, name=name)
    try:
        ray.get(group.ready(), timeout=120)
    except Exception as exc:
        ray.util.remove_placement_group(group)
        raise RuntimeError(
            f"Ray could not place {len(cleaned)} bundle(s) {cleaned[0]} with strategy {config.placement_strategy} "
            f"within 120 s ({type(exc).__name__}): the cluster lacks the resources; lower rollout.replicas or "
            "ray.engine_cpus / ray.engine_gpus, or add nodes."
        ) from None
    return [PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=i)
            for i in range(len(cleaned))], group


def colocated(config: Any, n: int) -> list[Any]:
    """Scheduling strategies for ``n`` actors in the one placement group trainer workers and engine replicas
    share (``ray.colocate``). The first caller creates it with ``n`` bundles of
    ``trainer_cpus + engine_cpus`` CPUs and ``trainer_gpus + engine_gpus`` GPUs; a later caller asking for more
    actors than bundles places them round robin (actor i in bundle i mod the bundle count)."""
    global _colocated
    with _lock:
        if _colocated is None:
            bundle = {"CPU": config.trainer_cpus + config.engine_cpus, "GPU": config.trainer_gpus + config.engine_gpus}
            strategies, group = placement(config, [bundle] * n, name=f"seal-colocated-{os.getpid()}-{uuid.uuid4().hex[:8]}")
            _colocated = (group, strategies)
        strategies = _colocated[1]
    return [strategies[i % len(strategies)] for i in range(n)]
