"""The hybrid-engine memory sequence: how a trainer and rollout engines that share GPUs hand the memory over.

Written once, here, and named; it is verl's sequence (``ActorRolloutRefWorker.rollout_mode`` /
``trainer_mode``), which OpenRLHF and SkyRL follow too:

* :func:`to_rollout_mode`, after an update: empty the trainer's allocator cache -> wake the engines' weights
  -> push the new weights -> offload the trainer's parameters and optimizer state (``grpo.trainer_offload``)
  -> empty the cache again -> wake the engines' KV cache;
* :func:`to_trainer_mode`, before an update: put the engines to sleep -> empty the cache -> bring the
  trainer's parameters and optimizer state back.

``torch.cuda.empty_cache()`` runs in the processes that hold the trainer's memory (the sharded trainer's
workers, or this process for a single-process trainer): a freed block stays reserved by torch's caching
allocator, invisible to a vLLM engine in another process, until it is emptied. Without CUDA every cache step is
a no-op and the sequence still runs in the same order (the CPU tests check the order).

The engines: :func:`to_rollout_mode` calls ``engine.wake_weights()`` and ``engine.wake_kv_cache()`` where the
engine has them. The vLLM engine does (:mod:`.engines.vllm_sleep`: ``wake_up(tags=["weights"])``, then, after the
push, the offload and the second ``empty_cache``, ``wake_up(tags=["kv_cache"])``), and so do engine replicas
(each replica's engine, :class:`.engines.routing.ReplicaClient`), so the order above is exact. An engine without
the two wakes (the hf engine: it never sleeps) has nothing to wake; one that slept without them would wake both
at once inside its push. On a GPU this sequence is designed to the documented torch and vLLM APIs and has never
run here (no GPU with vLLM is lent to this project); on CPU the tests check the order
(tests/grpo/test_vllm_wakes.py with vLLM's sleep API recorded, tests/grpo/test_trainer_init.py through
``GRPORun.optimize``).

:class:`HostOffload` moves tensors' storages to host memory and back in place (the parameter and optimizer
state objects stay the same, so FSDP's and the optimizer's references stay valid), as FSDP itself frees and
re-allocates unsharded parameters (``untyped_storage().resize_``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from seal_platform.engine import TrainableEngine

ROLLOUT_STEPS = ("empty_cache", "wake_weights", "push", "offload", "empty_cache", "wake_kv_cache")
TRAINER_STEPS = ("sleep", "empty_cache", "onload")


def empty_cache() -> None:
    """Give the caching allocator's free blocks back to the device (``torch.cuda.empty_cache``; no-op without
    CUDA or before CUDA was initialised in this process)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def to_rollout_mode(engine: TrainableEngine, trainer: Any, push: Callable[[], Any], *, offload: bool,
                    trace: list[str] | None = None) -> None:
    """After an update: hand the GPU memory to the rollout engines (the order of :data:`ROLLOUT_STEPS`).

    ``trainer``: what holds the trainer's memory, with ``empty_cache()``, ``offload()`` and ``onload()``
    (:class:`~.distributed.GroupTrainer` on its workers, :class:`LocalTrainerMemory` in this process);
    ``push``: sends the new weights into ``engine``; ``offload``: the trainer's parameters and optimizer
    state go to host memory. ``trace``: each step's name is appended as it runs."""
    log = trace.append if trace is not None else (lambda _: None)
    log("empty_cache")
    trainer.empty_cache()
    log("wake_weights")
    engine.wake_weights()
    log("push")
    push()
    if offload:
        log("offload")
        trainer.offload()
    log("empty_cache")
    trainer.empty_cache()
    log("wake_kv_cache")
    engine.wake_kv_cache()


def to_trainer_mode(engine: TrainableEngine, trainer: Any, *, sleep: Callable[[], None] | None = None,
                    trace: list[str] | None = None) -> None:
    """Before an update: take the GPU memory back from the engines (the order of :data:`TRAINER_STEPS`).

    ``sleep``: puts the engines sharing the trainer's GPUs to sleep (default ``engine.sleep``); the trainer
    then empties its cache and brings back what :func:`to_rollout_mode` offloaded (nothing if nothing was)."""
    log = trace.append if trace is not None else (lambda _: None)
    log("sleep")
    (sleep or engine.sleep)()
    log("empty_cache")
    trainer.empty_cache()
    log("onload")
    trainer.onload()


class HostOffload:
    """Tensors' storages moved to host memory and back, in place.

    :meth:`offload` copies each distinct storage into a host buffer (pinned on CUDA) and frees the device
    storage (``resize_(0)``); :meth:`onload` re-allocates it and copies the bytes back, so the values
    round-trip exactly and every tensor object (parameters, optimizer states, views) stays the same.
    On CPU the storages are freed and re-filled the same way (what the CPU tests check)."""

    def __init__(self) -> None:
        self._held: list[tuple[Any, Any]] = []

    @property
    def offloaded(self) -> bool:
        return bool(self._held)

    def offload(self, tensors: Iterable[Any]) -> int:
        """Move the storages of ``tensors`` to host memory; returns the bytes moved. Idempotent while held."""
        import torch

        if self._held:
            return 0
        seen: set[int] = set()
        moved = 0
        for tensor in tensors:
            storage = _local(tensor).untyped_storage()
            ptr = storage.data_ptr()
            if storage.nbytes() == 0 or ptr in seen:
                continue
            seen.add(ptr)
            pin = storage.device.type == "cuda"
            host = torch.empty(storage.nbytes(), dtype=torch.uint8, device="cpu", pin_memory=pin)
            host.untyped_storage().copy_(storage)
            storage.resize_(0)
            self._held.append((storage, host))
            moved += host.numel()
        return moved

    def onload(self) -> int:
        """Bring back what :meth:`offload` moved; returns the bytes moved."""
        moved = 0
        for storage, host in self._held:
            storage.resize_(host.numel())
            storage.copy_(host.untyped_storage())
            moved += host.numel()
        self._held = []
        return moved


def _local(tensor: Any) -> Any:
    """A DTensor's local shard (FSDP2's parameters and their optimizer states), else the tensor itself."""
    local = getattr(tensor, "_local_tensor", None)
    return local if local is not None else tensor


def trainer_tensors(model: Any, optimizer: Any) -> list[Any]:
    """What the trainer's offload moves: the parameters, their gradients if any, and the optimizer's state."""
    import torch

    out = []
    for p in model.parameters():
        out.append(p.detach())
        if p.grad is not None:
            out.append(p.grad)
    if optimizer is not None:
        for state in optimizer.state.values():
            out.extend(v for v in state.values() if isinstance(v, torch.Tensor))
    return out


class LocalTrainerMemory:
    """A single-process trainer's memory, in this process: what :func:`to_rollout_mode` and
    :func:`to_trainer_mode` act on for a :class:`~.trainer.GRPOTrainer`. Its cache is emptied; nothing is
    offloaded: its model is the driver's copy, which an hf engine may sample from and checkpoints read between
    steps (``grpo.trainer_offload`` acts on sharded workers, :class:`~.sharded.TrainerWorker`)."""

    def __init__(self, trainer: Any):
        self.trainer = trainer

    def empty_cache(self) -> None:
        empty_cache()

    def offload(self) -> None:
        pass

    def onload(self) -> None:
        pass
