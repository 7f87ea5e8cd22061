"""Connecting to Ray: join ``settings.ray.address`` or start a local Ray, once per process, shared by every user.

:class:`RayCluster` is what the plugin registers (``register_clusters``): the core's typed
:class:`seal_platform.registry.Cluster` contract over this module, which other plugins (grpo's engine replicas
and trainer workers) use as ``ctx.cluster``. Each user (the executor, the engine replicas, trainer workers)
takes a lease with :func:`acquire` and gives it back with :func:`release`; a Ray this process started is shut down when
the last lease is given back, a cluster it joined is only disconnected from. A locally started Ray gets the driver's
``sys.path`` as its workers' ``PYTHONPATH``, so whatever the driver can import (editable installs, test helpers) they
can too; on a real cluster install the same packages on every node (docs/scaling.md).
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

from .settings import RaySettings

_lock = threading.Lock()
_leases = 0


def acquire(config: RaySettings) -> None:
    """Make sure this process is connected to Ray as ``config`` (the recipe's ``settings.ray``) says."""
    global _leases
    import ray

    with _lock:
        if not ray.is_initialized():
            kwargs: dict[str, Any] = dict(namespace=config.namespace, ignore_reinit_error=True,
                                          log_to_driver=False, configure_logging=False)
            if config.address:
                ray.init(address=config.address, **kwargs)
            else:
                paths = [p for p in sys.path if p and os.path.isdir(p)]
                ray.init(num_cpus=config.num_cpus or max(8, os.cpu_count() or 1), include_dashboard=False,
                         runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(paths)}}, **kwargs)
        _leases += 1


def release() -> None:
    """Give a lease back; the last one shuts down a Ray this process started (or disconnects)."""
    global _leases
    import ray

    with _lock:
        _leases = max(0, _leases - 1)
        if _leases == 0 and ray.is_initialized():
            ray.shutdown()


def infra_errors() -> tuple[type[BaseException], ...]:
    """Ray's exceptions that mean the infrastructure, not the code, failed a call."""
    from ray import exceptions as rx

    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError", "NodeDiedError",
             "ObjectLostError", "OwnerDiedError", "LocalRayletDiedError", "ObjectFetchTimedOutError",
             "ReferenceCountingAssertionError", "OutOfMemoryError")
    return tuple(getattr(rx, n) for n in names if isinstance(getattr(rx, n, None), type))


@dataclass(frozen=True)
class RayCluster:
    """The ``ray`` cluster of a run (:class:`seal_platform.registry.Cluster`): leases on this module's
    connection, as ``settings`` says. Picklable (it travels with engine clients into episode actors)."""

    settings: RaySettings

    @property
    def name(self) -> str:
        return "ray"

    @property
    def address(self) -> str | None:
        return self.settings.address

    def acquire(self) -> None:
        acquire(self.settings)

    def release(self) -> None:
        release()

    def infra_errors(self) -> tuple[type[BaseException], ...]:
        return infra_errors()
