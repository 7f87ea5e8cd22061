"""Sharded GRPO training, one rank: a worker process holding one shard of the policy, its reference and its
AdamW states (``torch.distributed.fsdp.fully_shard``; NCCL on CUDA, gloo on CPU), started without full copies
(:mod:`.sharded_start`), training with :class:`~.sharded_trainer.ShardedGRPOTrainer` (which samples this rank
trains, and why the update equals the 1-process update).

Checkpoints are written sharded with ``torch.distributed.checkpoint`` (DCP): every rank writes its own shards
of the policy and the optimizer state under fully-qualified parameter names; DCP reshards on load, so a
checkpoint written by 2 workers loads into 1 (or 4). The LR schedule is a function of the update counter,
saved beside the shards. The reference policy is not saved: it is the initial policy, rebuilt from the model
source (as the single-process trainer does on resume).

:class:`TrainerWorker` is one rank; :mod:`.distributed` drives a group of them (local processes or Ray actors).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from seal_platform_libs.policy.loading import PolicySettings
from seal_platform_libs.policy.memory_phases import HostOffload, empty_cache, trainer_tensors

from .samples import Sample
from .settings import GRPOSettings
from .sharded_start import start_models
from .sharded_trainer import ShardedGRPOTrainer, balanced_slices, output_layer_in_root  # noqa: F401 - re-exported

STATE_FILE = "trainer_state.json"
FORMAT_VERSION = 1


@dataclass
class WorkerOptions:
    """What every rank of one training group must agree on (besides its rank).

    ``grpo`` and ``policy`` are the recipe's settings sections; ``policy`` is the model source (a local Hugging
    Face directory or the embedded model; every rank reads the same files). ``temperature`` divides the logits
    as in :class:`~.trainer.GRPOTrainer`; ``pad_id`` pads micro-batches; ``seed`` seeds torch on every rank
    (a ``random_init`` policy is then the same on all ranks); ``backend``: ``None`` picks NCCL on CUDA, gloo
    on CPU; ``device``: ``None`` picks ``cuda:<local rank>`` when CUDA is available, else CPU.
    ``build_model``: builds the policy instead of loading ``policy.model`` (random weights of a given shape, for
    benchmarks); called with no argument, on rank 0 after seeding for the weights and on every rank under
    ``torch.device("meta")`` for the sharded skeleton (:mod:`.sharded_start`), it must be picklable (a
    module-level function or a ``functools.partial`` of one) when the workers are spawned processes.
    """

    grpo: GRPOSettings
    policy: PolicySettings
    temperature: float = 1.0
    pad_id: int = 0
    seed: int = 0
    backend: str | None = None
    device: str | None = None
    build_model: Callable[[], Any] | None = None


# --- one rank -------------------------------------------------------------------------------------------------


class TrainerWorker:
    """One rank of a sharded GRPO training group.

    Construct one per worker process with the same ``address``/``port`` (the rendezvous: rank 0 listens there)
    and ``options``; the constructor joins the process group, shards the policy and a frozen reference copy
    with FSDP2, rank 0 alone reading ``options.policy`` (:mod:`.sharded_start`), and builds the AdamW optimizer
    over the shards. Every method but :meth:`close`, :meth:`empty_cache`, :meth:`offload` and :meth:`onload`
    is collective: call it on all ranks at once with the same arguments.
    """

    def __init__(self, rank: int, world_size: int, address: str, port: int, options: WorkerOptions):
        import torch.distributed as dist

        self.rank, self.world_size, self.options = rank, world_size, options
        cuda = torch.cuda.is_available() and options.device != "cpu"
        if options.device and not (options.device == "cuda" and cuda):
            self.device = torch.device(options.device)
        elif cuda:  # "cuda" without an index too: this rank's own GPU (torch.cuda.set_device needs the index)
            self.device = torch.device("cuda", rank % torch.cuda.device_count())
        else:
            self.device = torch.device("cpu")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        backend = options.backend or ("nccl" if self.device.type == "cuda" else "gloo")
        if not dist.is_initialized():
            dist.init_process_group(backend, init_method=f"tcp://{address}:{port}", rank=rank, world_size=world_size)
            self._owns_group = True
        else:
            self._owns_group = False
        torch.manual_seed(options.seed)
        self.model, self.ref_model, self.tokenizer, grpo = start_models(options, rank, self.device)
        self._offload = HostOffload()
        self._syncs: dict[str, tuple[Any, Any]] = {}  # role -> (key, weight-sync group) this rank sends over
        # The reference is the policy as loaded, so until the first update they are equal: zero-advantage
        # samples are skipped and the reference's log-probs are the policy's own, as in the 1-process trainer
        # (.skipping); a resumed trainer (restored_updates) drops this.
        self.trainer = ShardedGRPOTrainer(
            self.model, grpo, ref_model=self.ref_model, temperature=options.temperature, pad_id=options.pad_id,
            policy_is_reference=self.ref_model is not None,
        )

    @property
    def updates(self) -> int:
        """Optimizer updates done so far (the LR schedule's position)."""
        return self.trainer.updates

    def step(self, samples: Sequence[Sample]) -> dict[str, float]:
        """One step's update on ``samples`` (the whole step's samples, the same list on every rank; this rank
        trains its slice). Returns the step's metrics, the same on every rank and equal to the 1-process
        :meth:`~.trainer.GRPOTrainer.step` 's up to float rounding."""
        self.onload()
        try:  # an offloaded reference (grpo.ref_offload) is on the device for the step only (.reference)
            return self.trainer.step(list(samples))
        finally:
            empty_cache()  # the update's activations and gathered parameters go back to the device

    # the hybrid-engine memory sequence's trainer side (.memory_phases)

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()`` in this rank's process (no-op on CPU)."""
        empty_cache()

    def offload(self) -> int:
        """Move this rank's parameter shards and optimizer state to host memory (``grpo.trainer_offload``);
        returns the bytes moved. Not collective."""
        return self._offload.offload(trainer_tensors(self.model, self.trainer.optimizer))

    def onload(self) -> int:
        """Bring back what :meth:`offload` moved (nothing if nothing was); returns the bytes moved."""
        return self._offload.onload()

    def device_type(self) -> str:
        """``cuda`` or ``cpu``: where this rank trains."""
        return self.device.type

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The unsharded policy weights (CPU tensors, the model's own names) on rank 0, None on the others:
        what the rollout engines load after an update (weight sync)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        self.onload()  # an offloaded trainer (grpo.trainer_offload) is brought back for anything but sampling
        state: dict[str, Any] = get_model_state_dict(
            self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if self.rank != 0:
            return None
        if self.world_size == 1 and self.device.type == "cpu":  # those are the live parameters: a snapshot
            state = {k: v.detach().clone() for k, v in state.items()}
        return state

    def push_weights(self, address: str, port: int | Sequence[int], world_size: int | Sequence[int], version: int,
                     everything: bool, bucket_bytes: int, backend: str = "gloo", cast: str | None = None,
                     timeout_s: float = 600.0) -> dict[str, float] | None:
        """Push the policy's weights over weight-sync groups (see :mod:`.weight_sync`): every rank gathers the
        shards bucket by bucket, and a rank that holds a group sends each bucket to its receivers (it joins the
        group at ``address:port`` as its rank 0 on the first call; ``backend``: gloo, or auto/nccl/ipc on this
        rank's device, see :class:`.weight_sync.SyncGroup`). ``port`` and ``world_size``: one int for rank 0's
        group alone (the driver's copy), or one per rank (0: no group on that rank;
        :mod:`seal_platform_libs.policy.device_push` gives each colocated rank its own). ``cast``: the dtype the buckets
        travel in (the engines'; None: the policy's); ``timeout_s``: the group's per-operation timeout. Collective.
        ``everything``: all parameters, else the trainable ones. Rank 0's push statistics, None elsewhere."""
        from seal_platform_libs.policy.weight_sync import SyncGroup, push, sync_tensors

        per_rank = not isinstance(port, int)  # the engines' groups, kept apart from the driver's
        role = "engines" if per_rank else "driver"
        mine = int(port if isinstance(port, int) else port[self.rank]) if per_rank or self.rank == 0 else 0
        size = int(world_size if isinstance(world_size, int) else world_size[self.rank])
        group = None
        if mine:
            key = (address, int(mine), int(size), backend)
            held = self._syncs.get(role)
            if held is None or held[0] != key:
                self._close_sync(role)
                device = self.device if backend in ("nccl", "ipc", "auto") else "cpu"
                self._syncs[role] = (key, SyncGroup(address, mine, 0, size, backend=backend, device=device,
                                                    timeout_s=timeout_s))
            group = self._syncs[role][1]
        elif per_rank:  # this rank sends to no engine in this push's groups: a group it held is stale
            self._close_sync(role)
        self.onload()
        named, ties = sync_tensors(self.model, everything)
        sender = _KeepsGathering(group) if group is not None else None
        stats = push(named, sender, version=version, ties=ties, bucket_bytes=bucket_bytes, cast=cast)
        if sender is not None and sender.error is not None:
            raise sender.error
        return stats if self.rank == 0 else None

    def _close_sync(self, role: str | None = None) -> None:
        """Leave the weight-sync group of ``role`` (``driver``, ``engines``; None: both)."""
        for name in [role] if role else list(self._syncs):
            held = self._syncs.pop(name, None)
            if held is not None:
                held[1].close()

    def save(self, directory: str | os.PathLike) -> None:
        """Write this group's sharded checkpoint into ``directory`` (DCP: policy and optimizer shards, every
        rank its own; plus ``trainer_state.json`` with the update counter and the world size)."""
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        directory = Path(directory)
        self.onload()
        model_state, optim_state = get_state_dict(self.model, self.trainer.optimizer)
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(directory))
        if self.rank == 0:
            meta = {"format": FORMAT_VERSION, "updates": self.trainer.updates, "world_size": self.world_size}
            (directory / STATE_FILE).write_text(json.dumps(meta))
        dist.barrier()

    def load(self, directory: str | os.PathLike) -> dict[str, Any]:
        """Restore a checkpoint :meth:`save` wrote, with any worker count (DCP reshards). Returns its
        ``trainer_state.json``."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        directory = Path(directory)
        meta = read_state(directory)
        self.onload()
        model_state, optim_state = get_state_dict(self.model, self.trainer.optimizer)
        state: dict[str, Any] = {"model": model_state, "optim": optim_state}
        dcp.load(state, checkpoint_id=str(directory))
        set_state_dict(self.model, self.trainer.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        self.trainer.restored_updates(int(meta["updates"]))
        return meta

    def close(self) -> None:
        """Leave the process group (when this worker created it). Not collective."""
        import torch.distributed as dist

        self._close_sync()
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()
            self._owns_group = False


class _KeepsGathering:
    """A sending rank's sync group whose first failed broadcast is kept, not raised, and whose later ones are
    skipped: the rank goes on gathering every bucket with the other training ranks (their all-gathers would
    otherwise wait for it until the training group's timeout) and raises once the push is over."""

    def __init__(self, group: Any):
        self.group, self.device = group, group.device
        self.error: Exception | None = None

    def broadcast(self, tensor: Any) -> None:
        if self.error is None:
            try:
                self.group.broadcast(tensor)
            except Exception as exc:
                self.error = exc


def read_state(directory: Path) -> dict[str, Any]:
    """The ``trainer_state.json`` of a sharded checkpoint, with a clear error when it is not one."""
    path = Path(directory) / STATE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{directory} holds no sharded grpo checkpoint ({STATE_FILE} missing)")
    meta = json.loads(path.read_text())
    if meta.get("format") != FORMAT_VERSION:
        raise ValueError(
            f"{path}: sharded checkpoint format {meta.get('format')!r}, this version reads {FORMAT_VERSION}"
        )
    return meta


def save_single_process(directory: Path, model: Any, optimizer: Any, updates: int) -> None:
    """Write a whole (unsharded) model and its optimizer as a sharded checkpoint (without a process group)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(directory), no_dist=True)
    meta = {"format": FORMAT_VERSION, "updates": int(updates), "world_size": 1}
    (Path(directory) / STATE_FILE).write_text(json.dumps(meta))


def load_sharded_into(model: Any, trainer: Any, directory: Path) -> None:
    """Restore a sharded checkpoint into ``trainer``: a :class:`GroupTrainer` loads it on its workers; a
    single-process :class:`~.trainer.GRPOTrainer` reads it without a process group (DCP reshards N shards
    into one whole model and optimizer)."""
    if hasattr(trainer, "load_sharded"):
        trainer.load_sharded(directory)
        return
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    meta = read_state(directory)
    model_state, optim_state = get_state_dict(model, trainer.optimizer)
    state: dict[str, Any] = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=str(directory), no_dist=True)
    set_state_dict(model, trainer.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    trainer.restored_updates(int(meta["updates"]))
