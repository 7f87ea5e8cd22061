"""The sharded GRPO trainer: the policy update of one rank of N worker processes with torch FSDP2.

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

The worker process around it (model start, checkpoints) is :mod:`.sharded`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from seal_platform_libs.policy.packing import PACKED_SDPA, attention_implementation

from .samples import Sample, StepTally, engine_diff_sums
from .settings import GRPOSettings
from .skipping import predicted_batch_runs
from .trainer import GRPOTrainer

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
    sharded = isinstance(model, FSDPModule)  # (not narrowing `model` to the mixin: it stays an nn.Module)
    if layer is None or not sharded:
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
            if self.settings.kl_coef > 0 and not self.policy_is_reference:  # at the reference: no reference pass
                self.fill_logprobs(self.ref_model, [], "ref_logp")
            (self._idle_logits(self.model).float().sum() * 0.0).backward()

    def _reduce_stats(self, tally: StepTally) -> None:
        import torch.distributed as dist

        summed = torch.tensor(
            [getattr(tally, k) for k in tally.SUMMED], dtype=torch.float64, device=self._comm_device()
        )
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
