"""The GRPO trainer: one policy update per training step.

A step's trajectories become :class:`Sample` s (their exact token sequences from
:func:`~seal_platform_libs.policy.tokens.encode_episode`, the positions of the tokens the model generated,
and their advantage: the group-normalised reward times the A-Patch weight). The step then does what verl's
actor does:

1. old log-probs: recomputed with the policy before the first update (or taken from the engine, a setting);
   the first mini-batch needs no extra pass - the policy has not moved yet when it is trained on, so its
   own forward pass provides them;
2. reference log-probs from a frozen copy of the initial policy when the KL term is on;
3. ``epochs_per_step`` passes over mini-batches of ``mini_batch_tasks`` groups, one optimizer update each,
   every mini-batch split into micro-batches whose gradients accumulate (memory stays bounded);
   ``sum_t w_t loss_t`` with the aggregation weights of the whole mini-batch makes the accumulated gradient
   exactly that of the whole mini-batch.

Trajectories with advantage 0 are not run at all when their loss and gradient are exactly 0: without KL and
entropy terms, and with a k2/k3 KL term while the policy still equals the reference (``grpo.zero_advantage``,
see :mod:`.skipping`; the skipped work is in the metrics). The forward passes (prefix sharing, chunked
log-probs) are :mod:`.forward`'s; the samples and what a step adds up are :mod:`.samples`'.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from seal_platform_libs.policy.dropout import disable_dropout, train_mode_is_eval_mode
from seal_platform_libs.policy.packing import check_packable, prefer_flash_attention, use_packed_sdpa
from seal_platform_libs.policy.reference import ReferenceOffload, reference_dtype, reference_policy

from .forward import LogprobPasses
from .objective import LossTerms, grpo_token_loss
from .samples import (
    LOSS_PARTS,
    Sample,
    StepTally,
    engine_diff_sums,
    filled,
    keep_policy_logprobs,
    token_importance,
    weights_by_sample,
)
from .settings import GRPOSettings
from .skipping import SkipCounter, can_skip, predicted_runs


def _as_float(value: Any) -> float:
    """A scalar tensor as a float (a DTensor from a sharded model is made whole first)."""
    full = getattr(value, "full_tensor", None)
    return float(full() if callable(full) else value)


def attention_kernels() -> set[Any]:
    """torch's fused scaled-dot-product attention operators (CPU flash, CUDA flash, memory-efficient,
    cuDNN): what ``F.scaled_dot_product_attention`` dispatches to, and what transformers' ``sdpa`` attention
    runs."""
    names = ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention")
    return {getattr(torch.ops.aten, name).default for name in names if hasattr(torch.ops.aten, name)}


def enable_gradient_checkpointing(model: Any, keep_attention: bool = True) -> None:
    """Gradient checkpointing of ``model``'s decoder layers (transformers' own, non-reentrant); with
    ``keep_attention`` the attention kernels' outputs are saved and only the rest of each layer is recomputed
    (torch's selective activation checkpointing). Attention implementations that are not one fused kernel
    (``eager``) are recomputed whole either way."""
    if not keep_attention:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return
    import functools

    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    keep = attention_kernels()

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
        return CheckpointPolicy.MUST_SAVE if op in keep else CheckpointPolicy.PREFER_RECOMPUTE

    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={
        "use_reentrant": False, "context_fn": functools.partial(create_selective_checkpoint_contexts, policy),
    })


def build_optimizer(params: Iterable[Any], settings: GRPOSettings) -> torch.optim.Optimizer:
    """The policy's optimizer (AdamW with ``grpo``'s learning rate, betas, eps and weight decay): the one
    place it is built, for the single-process trainer, each sharded rank and a resume onto workers."""
    s = settings
    params = list(params)
    # torch's fused AdamW (one kernel over all of a tensor's update; on CPU about 5x less time than the
    # per-operation foreach path, measured on SmolLM2-135M: ~5% of a GRPO step) where every parameter allows
    # it: plain CPU/CUDA floating-point tensors, not the sharded (DTensor) parameters of FSDP2.
    fused = bool(params) and all(
        p.device.type in ("cpu", "cuda") and p.is_floating_point() and not hasattr(p, "placements") for p in params
    )
    return torch.optim.AdamW(params, lr=s.lr, betas=(s.betas[0], s.betas[1]), eps=s.adam_eps,
                             weight_decay=s.weight_decay,
                             fused=fused or None)


class GRPOTrainer(LogprobPasses):
    """Holds the policy, its optimizer and the frozen reference policy; :meth:`step` does one update."""

    def __init__(
        self,
        model: Any,
        settings: GRPOSettings | None = None,
        *,
        ref_model: Any | None = None,
        temperature: float = 1.0,
        pad_id: int = 0,
        policy_is_reference: bool = False,
    ):
        self.settings = settings or GRPOSettings()
        s = self.settings
        self.model = model
        if s.kl_coef > 0 and ref_model is None:
            raise ValueError(
                "settings.grpo.kl_coef > 0 needs a reference model (GRPOTrainer.with_reference builds one)"
            )
        if s.old_logprobs == "engine" and temperature != 1.0:
            raise ValueError(
                "settings.grpo.old_logprobs = engine needs rollout temperature 1: engines report log-probs at "
                f"temperature 1, the objective needs them at temperature {temperature}. Use "
                "settings.grpo.old_logprobs: recompute."
            )
        self.ref_model = ref_model
        self.temperature = float(temperature)
        self.pad_id = int(pad_id)
        self.device = next(model.parameters()).device
        self._output_heads = {}
        self._repeatable_caches = {}
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(params, s)
        self.updates = 0
        # grpo.ref_offload: the reference waits in host memory between steps (GPU only; see .reference)
        self.ref_offload = ReferenceOffload(ref_model, s.ref_offload and self.device.type == "cuda")
        # True while the policy's weights equal the reference's (no update since it was copied): zero-advantage
        # trajectories then change nothing even with a KL term (see .skipping).
        self.policy_is_reference = bool(policy_is_reference and ref_model is not None)
        for m in (model, ref_model):  # no dropout in any pass, whatever the mode (see .dropout)
            if m is not None:
                disable_dropout(m)
        if s.gradient_checkpointing:
            enable_gradient_checkpointing(model, keep_attention=s.checkpoint_keep_attention)
            if not train_mode_is_eval_mode(model, self.device):
                raise ValueError(
                    "settings.grpo.gradient_checkpointing runs the policy in train mode, and this model's outputs "
                    "there differ from eval mode even with its dropout switched off (randomness such as a router's "
                    "jitter noise): the update's log-probs would not be the rollouts'. Set "
                    "settings.grpo.gradient_checkpointing: false"
                )
        if s.fused_rotary:
            from seal_platform_libs.policy.rotary import use_fused_rotary

            for m in (model, ref_model):
                if m is not None:
                    use_fused_rotary(m)
        if s.pack_sequences:  # flash-attn's varlen kernels on CUDA, else SDPA per packed sequence (see .packing)
            for m in (model, ref_model):
                if m is not None and hasattr(m, "set_attn_implementation") and not prefer_flash_attention(m):
                    use_packed_sdpa(m)
                if m is not None:
                    check_packable(m)
        if s.logits_chunk_tokens:  # each model's output head is probed here, before any step (see .output_head)
            with self._autocast():
                for m in (model, ref_model):
                    if m is not None and hasattr(m, "get_output_embeddings"):
                        self._output_head(m)
        if s.pack_sequences or s.shared_prefix:
            for m in (model, ref_model):
                if m is not None:
                    self.check_passes(m)
        self.ref_offload.away()

    @classmethod
    def with_reference(cls, model: Any, settings: GRPOSettings | None = None, **kwargs: Any) -> GRPOTrainer:
        """A trainer whose KL reference is a frozen copy of ``model`` as it is now (when the KL term is on)."""
        settings = settings or GRPOSettings()
        ref = None
        if settings.kl_coef > 0:  # in grpo.ref_dtype (auto: bfloat16 on CUDA), as the sharded ranks hold it
            device = next(model.parameters()).device
            ref = reference_policy(model, reference_dtype(settings.ref_dtype, device))
        # A frozen copy equals the policy until the first update; a LoRA policy's adapters-off reference is
        # not assumed equal (adapters need not start at zero), so nothing is skipped on that account.
        from seal_platform_libs.policy.lora import is_lora

        at_reference = ref is not None and not is_lora(model)
        return cls(model, settings, ref_model=ref, policy_is_reference=at_reference, **kwargs)

    # --- the update -------------------------------------------------------------------------------------

    def mini_batches(self, samples: Sequence[Sample]) -> list[list[Sample]]:
        """Consecutive chunks of ``mini_batch_tasks`` groups (in order of first appearance)."""
        groups: dict[str, list[Sample]] = {}
        for s in samples:
            groups.setdefault(s.group, []).append(s)
        ordered = list(groups.values())
        k = self.settings.mini_batch_tasks
        return [[s for g in ordered[i : i + k] for s in g] for i in range(0, len(ordered), k)]

    def _lr(self) -> float:
        s = self.settings
        if s.lr_warmup_updates and self.updates < s.lr_warmup_updates:
            return s.lr * (self.updates + 1) / s.lr_warmup_updates
        return s.lr

    def step(self, samples: Sequence[Sample]) -> dict[str, float]:
        """One training step's update on ``samples``; returns metrics (means over the optimizer updates). An
        offloaded reference (``grpo.ref_offload``) is on the device for the step only."""
        self.ref_offload.back()
        try:
            return self._step(samples)
        finally:
            self.ref_offload.away()

    def _step(self, samples: Sequence[Sample]) -> dict[str, float]:
        started = time.perf_counter()
        was_training = self.model.training
        # Dropout stays off (eval mode) so the recomputed old log-probs equal the training pass's; gradient
        # checkpointing in transformers only engages in train mode.
        self.model.train(self.settings.gradient_checkpointing)
        batches = self.mini_batches(samples)
        self._partition(batches)
        self._prepare_old_logprobs(samples, batches)
        engine_diff = self._engine_diff(samples)
        tally = StepTally()
        for _ in range(self.settings.epochs_per_step):
            for batch in batches:
                self._train_mini_batch(batch, tally)
        self.model.train(was_training)
        self._reduce_stats(tally)
        return self._step_metrics(samples, tally, engine_diff, time.perf_counter() - started)

    def _prepare_old_logprobs(self, samples: Sequence[Sample], batches: Sequence[Sequence[Sample]]) -> None:
        """Old log-probs that must exist before the first update: the engine's (``old_logprobs: engine``, where
        it reported every token's), then a recomputation for the mini-batches trained on after an update (the
        first mini-batch's come from its own training pass)."""
        if self.settings.old_logprobs == "engine":
            for sample in samples:
                if sample.n_tokens and all(lp is not None for lp in sample.engine_logprobs):
                    sample.old_logp = torch.tensor(sample.engine_logprobs, dtype=torch.float32, device=self.device)
        later = predicted_runs(batches, self.settings, self.policy_is_reference)
        self.fill_logprobs(self.model, self._local(later), "old_logp")

    def _train_mini_batch(self, batch: Sequence[Sample], tally: StepTally) -> None:
        """One optimizer update on a mini-batch: skip what cannot change it, accumulate the micro-batches'
        gradients with the whole mini-batch's aggregation weights, then update."""
        at_reference = self.policy_is_reference
        active = self._active_samples(batch, at_reference, tally.skips)
        if not active:
            tally.skips.mini_batches += 1
            return
        tally.trained_ids.update(id(x) for x in active)
        weights = weights_by_sample(batch, self.settings.loss_agg)
        self.optimizer.zero_grad(set_to_none=True)
        parts = dict.fromkeys(LOSS_PARTS, 0.0)
        for micro in self._accumulation_batches(self._local(active)):
            terms = self._micro_batch_backward(micro, weights, at_reference, tally)
            for key in parts:
                parts[key] += float(getattr(terms, key).detach())
        norm = self._apply_update(tally)
        for key, value in parts.items():
            setattr(tally, key, getattr(tally, key) + value)
        tally.grad_norm += norm if math.isfinite(norm) else 0.0

    def _active_samples(self, batch: Sequence[Sample], at_reference: bool, skips: SkipCounter) -> list[Sample]:
        """The samples of ``batch`` whose loss or gradient can be non-zero; the others are counted as skipped."""
        active = []
        for x in batch:
            if not can_skip(x, self.settings, at_reference):
                active.append(x)
            elif x.n_tokens:
                skips.skip(x)
        return active

    def _micro_batch_backward(
        self, micro: Sequence[Sample], weights: dict[int, list[float]], at_reference: bool, tally: StepTally
    ) -> LossTerms:
        """The GRPO loss of one micro-batch, back-propagated into the accumulated gradient; its terms."""
        s = self.settings
        need_ref = s.kl_coef > 0
        if need_ref and not at_reference:
            self.fill_logprobs(self.ref_model, micro, "ref_logp")
        logp, ent = self._forward(self.model, micro, entropy=True)
        own_pass = keep_policy_logprobs(micro, logp, as_reference=need_ref and at_reference)
        if tally.updates:  # the policy has moved since the step began: its own pass is not the old policy's
            tally.own_pass_ratio_samples += own_pass
        dev = logp.device
        old = torch.cat([filled(x.old_logp).to(dev) for x in micro])
        adv = torch.tensor([x.advantage for x in micro for _ in x.positions], dtype=torch.float32, device=dev)
        if any(x.importance_cap for x in micro):
            adv = adv * token_importance(micro, dev)
        w = torch.tensor([v for x in micro for v in weights[id(x)]], dtype=torch.float32, device=dev)
        ref = torch.cat([filled(x.ref_logp).to(dev) for x in micro]) if need_ref else None
        terms = grpo_token_loss(
            logp, old, adv, w, ref_logp=ref, entropy=ent,
            clip_low=s.clip_ratio_low, clip_high=s.clip_ratio_high, dual_clip=s.dual_clip,
            kl_coef=s.kl_coef, kl_estimator=s.kl_estimator, entropy_coef=s.entropy_coef,
        )
        terms.loss.backward()
        tally.count_micro_batch(terms, logp.detach(), old, micro)
        return terms

    def _apply_update(self, tally: StepTally) -> float:
        """Clip the accumulated gradient and take the optimizer step, unless its norm is not finite (that
        would destroy the weights: the update is skipped); the gradient norm."""
        s = self.settings
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        max_norm = s.grad_clip if s.grad_clip is not None else math.inf
        norm = _as_float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        if math.isfinite(norm):
            for group in self.optimizer.param_groups:
                group["lr"] = self._lr()
            self.optimizer.step()
            self.updates += 1
            self.policy_is_reference = False
            tally.updates += 1
        else:
            tally.skipped += 1
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def _step_metrics(
        self, samples: Sequence[Sample], tally: StepTally, engine_diff: float | None, elapsed: float
    ) -> dict[str, float]:
        n_updates = tally.updates + tally.skipped
        tokens = max(tally.tokens, 1)
        metrics = {key: (getattr(tally, key) / n_updates if n_updates else 0.0) for key in (*LOSS_PARTS, "grad_norm")}
        metrics.update(
            clip_frac=tally.clipped / tokens,
            dual_clip_frac=tally.dual / tokens,
            approx_kl=tally.approx_kl / tokens,
            ratio_max=tally.ratio_max,
            updates=float(tally.updates),
            skipped_updates=float(tally.skipped),
            trained_sequences=float(len(tally.trained_ids)),
            generated_tokens=float(sum(x.n_tokens for x in samples)),
            trained_tokens=float(tally.trained_tokens),
            own_pass_ratio_samples=float(tally.own_pass_ratio_samples),
            tokens_per_s=tally.trained_tokens / elapsed if elapsed > 0 else 0.0,
            update_s=elapsed,
            lr=self._lr(),
            **tally.skips.metrics(),
        )
        if engine_diff is not None:
            metrics["engine_logprob_abs_diff"] = engine_diff
        return metrics

    # Hooks for a sharded trainer (sharded.ShardedGRPOTrainer): one process trains everything here.

    def _partition(self, batches: Sequence[Sequence[Sample]]) -> None:
        """Decide, at the start of a step on ``batches``, which process trains each sample (and computes its
        old log-probs: the same one). One process trains them all."""

    def _local(self, samples: Sequence[Sample]) -> list[Sample]:
        """The samples among ``samples`` that this process trains (and computes the old log-probs of)."""
        return list(samples)

    def _accumulation_batches(self, samples: Sequence[Sample]) -> Iterable[list[Sample]]:
        """The micro-batches whose gradients make one optimizer update."""
        return self._micro_batches(samples)

    def _reduce_stats(self, tally: StepTally) -> None:
        """Make the step's loss parts and counts those of all processes that trained it."""

    def _engine_diff(self, samples: Sequence[Sample]) -> float | None:
        """Mean |recomputed - engine| old log-prob, where both exist (a trainer/engine mismatch check)."""
        if not self._checks_engine_logprobs():
            return None
        total, n = engine_diff_sums(samples)
        return total / n if n else None

    def _checks_engine_logprobs(self) -> bool:
        """Whether the step compares recomputed old log-probs with the engine's (both at temperature 1)."""
        return self.settings.old_logprobs == "recompute" and self.temperature == 1.0

    # --- state --------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Optimizer state and the update counter (the model's weights are saved separately)."""
        return {"optimizer": self.optimizer.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.restored_updates(int(state.get("updates", 0)))

    def push_to_engine(self, engine: Any, version: int) -> bool:
        """False: this trainer's model is the driver's copy, which the caller pushes (GroupTrainer's contract)."""
        return False

    def restored_updates(self, updates: int) -> None:
        """Set the update counter restored from a checkpoint; after any update the policy no longer equals
        its reference (the KL term and the zero-advantage skip rule must not assume it does)."""
        self.updates = updates
        self.policy_is_reference = self.policy_is_reference and updates == 0
