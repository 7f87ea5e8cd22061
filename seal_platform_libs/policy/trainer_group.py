"""The driver's side of a sharded training group: N ranks of one worker class (grpo's FSDP2 ``TrainerWorker``),
every method collective.

:class:`TrainerGroup` forwards each call to every rank at once and returns rank 0's result; a subclass says how
a call reaches the ranks (:meth:`TrainerGroup._call`) and how the group ends (``close``): worker processes on
the driver's machine over pipes (grpo's ``LocalTrainerGroup``) or Ray actors in a placement group
(:class:`.ray_trainers.RayTrainerGroup`). The trainer that holds a group need not know where its ranks run.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any


class TrainerGroup(ABC):
    """N training ranks driven from this process; the methods mirror the worker's and return rank 0's result."""

    world_size: int

    @abstractmethod
    def _call(self, method: str, *args: Any) -> Any:
        """Call the worker's ``method`` with ``args`` on every rank at once; rank 0's result. Raises when a rank
        fails (the subclass says how)."""

    @abstractmethod
    def close(self) -> None:
        """End the ranks (politely, then by force); safe to call twice."""

    def step(self, samples: Sequence[Any]) -> dict[str, float]:
        """One update on the samples (each rank takes its share)."""
        return self._call("step", list(samples))

    def full_state_dict(self) -> dict[str, Any]:
        """The unsharded weights, gathered on rank 0."""
        return self._call("full_state_dict")

    def push_weights(self, *args: Any) -> dict[str, float] | None:
        """The ranks send their weights over a weight-sync group (rank 0's statistics)."""
        return self._call("push_weights", *args)

    def empty_cache(self) -> None:
        """Each rank's ``torch.cuda.empty_cache()`` (nothing on CPU)."""
        self._call("empty_cache")

    def device_type(self) -> str:
        """Where the ranks train (rank 0's ``cuda`` or ``cpu``)."""
        return self._call("device_type")

    def offload(self) -> int:
        """The ranks' parameter shards and optimizer states to host memory (rank 0's bytes)."""
        return self._call("offload")

    def onload(self) -> int:
        """Back from :meth:`offload` (rank 0's bytes)."""
        return self._call("onload")

    def save(self, directory: str | os.PathLike) -> None:
        """The group's sharded checkpoint in ``directory``."""
        self._call("save", str(directory))

    def load(self, directory: str | os.PathLike) -> dict[str, Any]:
        """Restore a sharded checkpoint (any rank count); rank 0's answer (the checkpoint's trainer state)."""
        return self._call("load", str(directory))

    @property
    def updates(self) -> int:
        """Rank 0's update count."""
        return int(self._call("get_updates"))

    def __enter__(self) -> TrainerGroup:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
