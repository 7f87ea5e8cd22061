"""Trainer workers as Ray actors: a sharded training group placed with a placement group.

:class:`RayTrainerGroup` drives N ranks of a worker class (grpo's FSDP2 ``TrainerWorker``: constructed as
``worker_cls(rank, world_size, address, port, options)``, every method collective) exactly as the local
process group does: both are a :class:`.trainer_group.TrainerGroup` (the forwarding methods), this one with
Ray as the transport, so the trainer that holds it need not know where the ranks run. The ranks go into one
placement group of ``grpo.placement.trainer_cpus`` / ``trainer_gpus`` bundles (``grpo.placement.strategy``) on
the run's Ray cluster; rank 0's node and a free port on it are the rendezvous. With ``grpo.placement.colocate``
the group is the one the engine replicas share (:func:`.on_ray.colocated`), bundle by bundle, and the engines
sleep during the update.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import Sequence
from typing import Any

import ray

from . import on_ray
from .trainer_group import TrainerGroup


@ray.remote(num_cpus=0)
def _rendezvous() -> tuple[str, int]:
    """Rank 0's address and a free port there (runs in rank 0's bundle)."""
    address = ray.util.get_node_ip_address()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return address, int(s.getsockname()[1])


def _actor_class(worker_cls: type) -> Any:
    class RayTrainerWorker(worker_cls):  # type: ignore[misc, valid-type]
        def get_updates(self) -> int:
            return int(self.updates)

        def ping(self) -> bool:
            return True

    RayTrainerWorker.__name__ = RayTrainerWorker.__qualname__ = f"Ray{worker_cls.__name__}"
    return ray.remote(max_restarts=0)(RayTrainerWorker)


class RayTrainerGroup(TrainerGroup):
    """N training ranks as Ray actors; the methods (:class:`.trainer_group.TrainerGroup`'s) mirror the worker's
    and return rank 0's result."""

    def __init__(self, worker_cls: type, world_size: int, options: Any, config: on_ray.OnRay,
                 timeout_s: float = 900.0):
        self.world_size = world_size
        self.config: on_ray.OnRay | None = config
        self._infra = on_ray.infra_errors(config)
        self.timeout_s = timeout_s
        self.actors: list[Any] = []
        self._group = None
        on_ray.acquire(config)
        place = config.placement
        try:
            if place.colocate:
                strategies = on_ray.colocated(config, world_size)
            else:
                bundles = [{"CPU": place.trainer_cpus, "GPU": place.trainer_gpus}] * world_size
                strategies, self._group = on_ray.placement(
                    config, bundles, name=f"seal-trainers-{os.getpid()}-{uuid.uuid4().hex[:8]}"
                )
            address, port = ray.get(_rendezvous.options(scheduling_strategy=strategies[0]).remote(), timeout=120)
            cls = _actor_class(worker_cls)
            gpus = place.trainer_gpus
            self.actors = [
                cls.options(num_cpus=place.trainer_cpus, num_gpus=gpus, scheduling_strategy=strategies[rank])
                .remote(rank, world_size, address, port, options)
                for rank in range(world_size)
            ]
            ray.get([a.ping.remote() for a in self.actors], timeout=timeout_s)
        except BaseException:
            self.close()
            raise

    def _call(self, method: str, *args: Any) -> Any:
        if not self.actors:
            raise RuntimeError("the Ray training group is closed")
        refs = [getattr(a, method).remote(*args) for a in self.actors]
        try:
            return ray.get(refs, timeout=self.timeout_s)[0]
        except self._infra as exc:
            raise RuntimeError(f"a training worker died ({type(exc).__name__}); the sharded group cannot go on "
                               "without it: resume the run from its last checkpoint") from exc

    def step(self, samples: Sequence[Any]) -> dict[str, float]:
        box = ray.put(list(samples))  # one copy in the object store, read by every rank
        return self._call("step", box)

    def close(self) -> None:
        actors, self.actors = self.actors, []
        if actors:
            with contextlib.suppress(Exception):  # dead or stuck: killed below
                ray.get([a.close.remote() for a in actors], timeout=30)
            for actor in actors:
                ray.kill(actor, no_restart=True)
        if self._group is not None:
            with contextlib.suppress(Exception):
                ray.util.remove_placement_group(self._group)
            self._group = None
        if self.config is not None:
            config, self.config = self.config, None
            on_ray.release(config)
