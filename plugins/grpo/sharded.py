"""Sharded GRPO training, one rank: the policy update across N worker processes with torch FSDP2.

Each worker is one process holding one shard (``torch.distributed.fsdp.fully_shard``, one shard per worker,
NCCL on CUDA, gloo on CPU) of the policy, of the frozen reference policy and of the AdamW states. The step's
objective and micro-batching are :class:`~.trainer.GRPOTrainer` 's own: :class:`ShardedGRPOTrainer` only
decides which samples this rank trains and keeps the ranks' collective calls in step, so that the update is the
1-process update (same weights, loss and metrics up to float rounding):

* every rank receives **all** of the step's samples (identical lists) and forms the same mini-batches; the
  per-token loss weights (``seq-mean-token-mean`` / ``token-mean``) are computed from the whole mini-batch, so
  they are the global normalisation without a collective; each rank then trains its slice of the mini-batch's
  samples (balanced by tokens, deterministic). The slices are cut once per mini-batch at the start of the step
  (from the samples it will run in any epoch) and the same rank computes a sample's old log-probs and trains it
  in every epoch: a sample trained where its old log-probs were not computed would take them from its own pass
  (ratio 1, never clipped; the step metric ``own_pass_ratio_samples`` counts such samples, 0 here);
* gradients are summed over ranks, not averaged (``set_gradient_divide_factor(1)``): each rank's loss is its
  part of one global sum;
* FSDP2 all-gathers parameters at every forward and reduce-scatters gradients at every backward, so every rank
  must make the same number of model calls: a rank with fewer micro-batches runs zero-weight one-token passes;
* loss parts and counts are summed over ranks (``ratio_max``: the max), the gradient norm is the global one.
* chunked log-probs (``grpo.logits_chunk_tokens``) apply the output layer outside the model's forward: it
  belongs to the root's FSDP unit (a tied one is the input embeddings, there too), whose parameters stay
  gathered from the root's forward to the end of its backward (fully_shard's default for the root), so the
  chunks and their recomputation in backward see the whole layer and its gradient is reduce-scattered with
  the root's (:func:`output_layer_in_root`; elsewhere the logits come from the model's own forward).

Prefix sharing (``grpo.shared_prefix``) is on on the sharded path only with packed rows under per-sequence SDPA
(the prompt at the head of each row, :mod:`.packing`); elsewhere its extra prefix pass would make ranks' call
sequences differ. It is an exact speed-up only, so the result is unchanged.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch

from .packing import PACKED_SDPA, attention_implementation
from .policy import PolicySettings
from .samples import Sample, StepTally, engine_diff_sums
from .settings import GRPOSettings
from .skipping import predicted_batch_runs
from .trainer import GRPOTrainer

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
    benchmarks); called with no argument after seeding, it must be picklable (a module-level function or a
    ``functools.partial`` of one) when the workers are spawned processes.
    """

    grpo: GRPOSettings
    policy: PolicySettings
    temperature: float = 1.0
    pad_id: int = 0
    seed: int = 0
    backend: str | None = None
    device: str | None = None
    build_model: Callable[[], Any] | None = None


# --- the sharded trainer ------------------------------------------------------------------------------------


def balanced_slices(samples: Sequence[Sample], world_size: int) -> list[list[Sample]]:
    """Split ``samples`` into ``world_size`` slices with about equal token counts (longest first onto the
    least-loaded rank; ties by rank). Deterministic; each slice keeps the samples' original order."""
    load = [0] * world_size
    owner: dict[int, int] = {}
    order = sorted(range(len(samples)), key=lambda i: (-len(samples[i].input_ids), i))
    for i in order:
        r = min(range(world_size), key=lambda k: (load[k], k))
        owner[i] = r
        load[r] += len(samples[i].input_ids)
    return [[s for i, s in enumerate(samples) if owner[i] == r] for r in range(world_size)]


def output_layer_in_root(model: Any) -> bool:
    """Whether ``model``'s output layer belongs to the FSDP unit of the root ``model`` itself (no module
    between them, nor the layer, is sharded as a unit of its own), where its parameters stay gathered from the
    root's forward to its backward's end (what the chunked log-probs outside the forward need)."""
    from torch.distributed.fsdp import FSDPModule

    layer = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if layer is None or not isinstance(model, FSDPModule):
        return False
    name = next((n for n, m in model.named_modules() if m is layer), None)
    if name is None:
        return False
    parts = name.split(".")
    return not any(isinstance(model.get_submodule(".".join(parts[:i])), FSDPModule) for i in range(1, len(parts) + 1))


class ShardedGRPOTrainer(GRPOTrainer):
    """:class:`~.trainer.GRPOTrainer` on an FSDP2-sharded policy, one rank of a process group.

    ``model`` (and ``ref_model``) must already be sharded with ``fully_shard`` and the default process group
    initialised. Call :meth:`step` on every rank with the same samples.
    """

    def __init__(self, model: Any, settings: GRPOSettings, **kwargs: Any):
        import torch.distributed as dist

        # Chunked log-probs (grpo.logits_chunk_tokens) apply the output layer to the final hidden states after
        # the model's forward, and again when the chunks are recomputed in backward. That layer's parameters
        # must then be gathered: they are where they belong to the root's FSDP unit, which (reshard_after_forward
        # unset: fully_shard's documented default for the root) keeps its parameters unsharded from its forward
        # until its post-backward; a tied output layer is the root's input embeddings, in that unit too.
        # Elsewhere (an output layer sharded as a unit of its own) the logits come from the model's forward.
        if settings.logits_chunk_tokens and not all(output_layer_in_root(m) for m in (model, kwargs.get("ref_model"))
                                                    if m is not None):
            settings = settings.model_copy(update={"logits_chunk_tokens": None})
        super().__init__(model, settings, **kwargs)
        # Every rank must make the same collective calls: prefix sharing stays on only where the prompt runs at
        # the head of a packed row (per-sequence SDPA), not in a pass of its own.
        in_row = settings.pack_sequences and all(
            attention_implementation(m) == PACKED_SDPA for m in (model, self.ref_model) if m is not None)
        if not in_row:
            self.settings = self.settings.model_copy(update={"shared_prefix": False})
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self._owners: dict[int, int] = {}  # id(sample) -> the rank that trains it, this step (see _partition)

    # hooks of GRPOTrainer.step

    def _partition(self, batches: Sequence[Sequence[Sample]]) -> None:
        # One partition per mini-batch, for the whole step: the samples a mini-batch may run in any epoch
        # (a superset of what it runs, see .skipping) split by tokens. The old-log-prob pass before the first
        # update and every training pass take a sample on the same rank.
        self._owners = {}
        for runs in predicted_batch_runs(batches, self.settings, self.policy_is_reference):
            self._assign(runs)

    def _assign(self, samples: Sequence[Sample]) -> None:
        for rank, part in enumerate(balanced_slices(samples, self.world_size)):
            self._owners.update((id(x), rank) for x in part)

    def _local(self, samples: Sequence[Sample]) -> list[Sample]:
        unowned = [x for x in samples if id(x) not in self._owners]
        if unowned:  # not predicted to run (never the case, see .skipping): split the same way on every rank
            self._assign(unowned)
        return [x for x in samples if self._owners[id(x)] == self.rank]

    def _max_over_ranks(self, n: int) -> int:
        import torch.distributed as dist

        t = torch.tensor([n], dtype=torch.long, device=self._comm_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def _comm_device(self) -> torch.device:
        return self.device if self.device.type == "cuda" else torch.device("cpu")

    def _idle_logits(self, model: Any) -> torch.Tensor:
        ids = torch.full((1, 1), self.pad_id, dtype=torch.long, device=self.device)
        with self._autocast():
            return model(input_ids=ids, use_cache=False, logits_to_keep=1).logits

    @torch.no_grad()
    def fill_logprobs(self, model: Any, samples: Any, attr: str) -> None:
        samples = list(samples)
        todo = [s for s in samples if getattr(s, attr) is None and s.n_tokens]
        mine = len(self._micro_batches(todo))
        total = self._max_over_ranks(mine)
        super().fill_logprobs(model, todo, attr)
        for _ in range(total - mine):
            self._idle_logits(model)

    def _accumulation_batches(self, samples: Sequence[Sample]) -> Iterator[list[Sample]]:
        micros = self._micro_batches(samples)
        total = self._max_over_ranks(len(micros))
        yield from micros
        # Zero-weight passes so that this rank makes the calls the others make (reference pass, then a
        # forward and backward of the policy): FSDP's all-gathers and reduce-scatters must pair up.
        for _ in range(total - len(micros)):
            if self.settings.kl_coef > 0:
                self.fill_logprobs(self.ref_model, [], "ref_logp")
            (self._idle_logits(self.model).float().sum() * 0.0).backward()

    def _reduce_stats(self, tally: StepTally) -> None:
        import torch.distributed as dist

        summed = torch.tensor([getattr(tally, k) for k in tally.SUMMED], dtype=torch.float64, device=self._comm_device())
        dist.all_reduce(summed)
        maxed = torch.tensor([getattr(tally, k) for k in tally.MAXED], dtype=torch.float64, device=self._comm_device())
        dist.all_reduce(maxed, op=dist.ReduceOp.MAX)
        for key, value in [*zip(tally.SUMMED, summed.tolist()), *zip(tally.MAXED, maxed.tolist())]:
            setattr(tally, key, type(getattr(tally, key))(value))  # counts stay ints (exact in float64)

    def _engine_diff(self, samples: Sequence[Sample]) -> float | None:
        import torch.distributed as dist

        if not self._checks_engine_logprobs():
            return None
        total, n = engine_diff_sums(samples)
        t = torch.tensor([total, n], dtype=torch.float64, device=self._comm_device())
        dist.all_reduce(t)
        return float(t[0] / t[1]) if t[1] > 0 else None


# --- one rank -------------------------------------------------------------------------------------------------


def _shard(model: Any, mp_policy: Any | None) -> None:
    """``fully_shard`` each transformer block (the classes the model names in ``_no_split_modules``), then the
    root; gradients are summed over ranks."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    block_names = set(getattr(model, "_no_split_modules", None) or [])
    kwargs = {"mp_policy": mp_policy} if mp_policy is not None else {}
    for module in model.modules():
        if type(module).__name__ in block_names:
            fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM


class TrainerWorker:
    """One rank of a sharded GRPO training group.

    Construct one per worker process with the same ``address``/``port`` (the rendezvous: rank 0 listens there)
    and ``options``; the constructor joins the process group, loads the policy from ``options.policy``, shards
    it and a frozen reference copy with FSDP2 and builds the AdamW optimizer over the shards. Every method but
    :meth:`close` is collective: call it on all ranks at once with the same arguments.
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
        self.model, self.tokenizer = self._load()
        grpo = options.grpo
        mp_policy = None
        if self.device.type == "cuda" and grpo.autocast != "off" and next(self.model.parameters()).dtype == torch.float32:
            from torch.distributed.fsdp import MixedPrecisionPolicy

            half = torch.float16 if grpo.autocast == "float16" else torch.bfloat16
            mp_policy = MixedPrecisionPolicy(param_dtype=half, reduce_dtype=torch.float32)
            grpo = grpo.model_copy(update={"autocast": "off"})  # FSDP casts the gathered parameters instead
        ref = None
        if grpo.kl_coef > 0:
            ref, _ = self._load()
            ref.requires_grad_(False)
            _shard(ref, mp_policy)
        _shard(self.model, mp_policy)
        self.trainer = ShardedGRPOTrainer(
            self.model, grpo, ref_model=ref, temperature=options.temperature, pad_id=options.pad_id
        )

    def _load(self) -> tuple[Any, Any]:
        from .policy import load_policy

        policy = self.options.policy.model_copy(update={"device": str(self.device)})
        torch.manual_seed(self.options.seed)  # a random_init policy is the same on every rank
        if self.options.build_model is not None:
            model = self.options.build_model().to(self.device)
            model.eval()
            return model, None
        return load_policy(policy)

    @property
    def updates(self) -> int:
        """Optimizer updates done so far (the LR schedule's position)."""
        return self.trainer.updates

    def step(self, samples: Sequence[Sample]) -> dict[str, float]:
        """One step's update on ``samples`` (the whole step's samples, the same list on every rank; this rank
        trains its slice). Returns the step's metrics, the same on every rank and equal to the 1-process
        :meth:`~.trainer.GRPOTrainer.step` 's up to float rounding."""
        return self.trainer.step(list(samples))

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The unsharded policy weights (CPU tensors, the model's own names) on rank 0, None on the others:
        what the rollout engines load after an update (weight sync)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        state = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if self.rank != 0:
            return None
        if self.world_size == 1 and self.device.type == "cpu":  # those are the live parameters: a snapshot
            state = {k: v.detach().clone() for k, v in state.items()}
        return state

    def push_weights(self, address: str, port: int, world_size: int, version: int, everything: bool,
                     bucket_bytes: int, backend: str = "gloo") -> dict[str, float] | None:
        """Push the policy's weights over a weight-sync group (``grpo.weight_sync: collective``; see
        :mod:`.weight_sync`): every rank gathers the shards bucket by bucket, rank 0 sends each bucket to the
        group's receivers (it joins the group at ``address:port`` as its rank 0 on the first call; ``backend``:
        gloo, or auto/nccl/ipc on this rank's device, see :class:`.weight_sync.SyncGroup`). Collective.
        ``everything``: all parameters, else the trainable ones. Rank 0's push statistics, None elsewhere."""
        from .weight_sync import SyncGroup, push, sync_tensors

        group = None
        if self.rank == 0:
            key = (address, int(port), int(world_size), backend)
            if getattr(self, "_sync_key", None) != key:
                self._close_sync()
                device = self.device if backend in ("nccl", "ipc", "auto") else "cpu"
                self._sync = SyncGroup(address, port, 0, world_size, backend=backend, device=device)
                self._sync_key = key
            group = self._sync
        named, ties = sync_tensors(self.model, everything)
        stats = push(named, group, version=version, ties=ties, bucket_bytes=bucket_bytes)
        return stats if self.rank == 0 else None

    def _close_sync(self) -> None:
        sync = getattr(self, "_sync", None)
        if sync is not None:
            sync.close()
        self._sync, self._sync_key = None, None

    def save(self, directory: str | os.PathLike) -> None:
        """Write this group's sharded checkpoint into ``directory`` (DCP: policy and optimizer shards, every
        rank its own; plus ``trainer_state.json`` with the update counter and the world size)."""
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        directory = Path(directory)
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
        model_state, optim_state = get_state_dict(self.model, self.trainer.optimizer)
        state = {"model": model_state, "optim": optim_state}
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


def read_state(directory: Path) -> dict[str, Any]:
    """The ``trainer_state.json`` of a sharded checkpoint, with a clear error when it is not one."""
    path = Path(directory) / STATE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{directory} holds no sharded grpo checkpoint ({STATE_FILE} missing)")
    meta = json.loads(path.read_text())
    if meta.get("format") != FORMAT_VERSION:
        raise ValueError(f"{path}: sharded checkpoint format {meta.get('format')!r}, this version reads {FORMAT_VERSION}")
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
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=str(directory), no_dist=True)
    set_state_dict(model, trainer.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    trainer.restored_updates(int(meta["updates"]))
