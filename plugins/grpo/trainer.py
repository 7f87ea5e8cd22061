"""The GRPO trainer: one policy update per training step.

A step's trajectories become :class:`Sample` s (their exact token sequences from
:func:`~seal_platform_plugins.grpo.tokens.encode_episode`, the positions of the tokens the model generated,
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

Two exact speed-ups: the prompt a micro-batch's sequences share (a group's system prompt and task) is run
once and its KV cache expanded to the rows (``shared_prefix``); trajectories with advantage 0 are not run
at all when their loss and gradient are exactly 0: without KL and entropy terms, and with a k2/k3 KL term
while the policy still equals the reference (``grpo.zero_advantage``, see :mod:`.skipping`; the skipped work
is in the metrics). Log-probs come from the final hidden states through the output layer in chunks that are
recomputed in backward (``grpo.logits_chunk_tokens``), so no sequence's full-vocabulary logits are kept.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Sequence

import torch

from seal_platform.types import Trajectory

from .objective import (
    LossTerms,
    chunked_logprobs,
    entropy_from_logits,
    grpo_token_loss,
    token_logprobs,
    token_weights,
)
from .apatch import group_advantages
from .settings import GRPOSettings
from .skipping import SkipCounter, can_skip, predicted_runs

# A shared prefix shorter than this is not worth a separate forward pass.
_MIN_SHARED_PREFIX = 8


@dataclass
class Sample:
    """One trajectory as the trainer sees it.

    ``positions`` are the indices in ``input_ids`` of the tokens the model generated (the loss tokens);
    ``engine_logprobs`` their log-probs as the engine reported them (None where it did not).
    """

    id: str
    group: str
    input_ids: list[int]
    positions: list[int]
    advantage: float
    engine_logprobs: list[float | None] = field(default_factory=list)
    old_logp: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None
    # Set for a stale sample kept with importance correction (see staleness.py): the weight's truncation.
    importance_cap: float | None = None
    # Cut to grpo.max_tokens_per_micro_batch tokens (its later tokens get no loss).
    truncated: bool = False

    @property
    def n_tokens(self) -> int:
        return len(self.positions)


# The loss terms a step reports (means over its optimizer updates), as named in objective.LossTerms.
LOSS_PARTS = ("loss", "pg_loss", "kl", "entropy")


@dataclass
class StepTally:
    """What one training step adds up. A sharded trainer makes the fields in :attr:`SUMMED` sums over its
    ranks and :attr:`MAXED` maxima; the others are the same on every rank."""

    SUMMED: ClassVar[tuple[str, ...]] = (*LOSS_PARTS, "tokens", "clipped", "dual", "approx_kl", "trained_tokens")
    MAXED: ClassVar[tuple[str, ...]] = ("ratio_max",)

    # Loss parts and gradient norms, summed over the optimizer updates.
    loss: float = 0.0
    pg_loss: float = 0.0
    kl: float = 0.0
    entropy: float = 0.0
    grad_norm: float = 0.0  # the global norm already, on every rank
    # Over the trained tokens: how many, how many clipped / dual-clipped, sum of 0.5 (logp - old)^2, max ratio.
    tokens: int = 0
    clipped: int = 0
    dual: int = 0
    approx_kl: float = 0.0
    ratio_max: float = 0.0
    updates: int = 0  # optimizer updates taken
    skipped: int = 0  # updates skipped for a non-finite gradient
    trained_tokens: int = 0  # sequence tokens run through the policy with a gradient
    trained_ids: set[int] = field(default_factory=set)
    skips: SkipCounter = field(default_factory=SkipCounter)

    def count_micro_batch(self, terms: LossTerms, logp: torch.Tensor, old: torch.Tensor, micro: Sequence[Sample]) -> None:
        delta = (logp - old).float()
        self.tokens += int(logp.numel())
        self.clipped += int(terms.clipped.sum())
        self.dual += int(terms.dual_clipped.sum())
        self.approx_kl += float((0.5 * delta**2).sum())
        self.ratio_max = max(self.ratio_max, float(delta.max().exp()))
        self.trained_tokens += sum(len(x.input_ids) for x in micro)


def _weights_by_sample(batch: Sequence[Sample], loss_agg: str) -> dict[int, list[float]]:
    """Each sample's (by ``id``) per-token aggregation weights, computed over the whole mini-batch."""
    weights = token_weights([x.n_tokens for x in batch], loss_agg)
    out, pos = {}, 0
    for x in batch:
        out[id(x)] = [weights[pos + j] for j in range(x.n_tokens)]
        pos += x.n_tokens
    return out


def _keep_policy_logprobs(micro: Sequence[Sample], logp: torch.Tensor, as_reference: bool) -> None:
    """Take the training pass's log-probs as old log-probs where none were computed (the first mini-batch:
    the policy has not moved yet) and, ``as_reference`` (the policy still equals the reference), as
    reference log-probs."""
    parts = torch.split(logp.detach(), [x.n_tokens for x in micro])
    for x, part in zip(micro, parts):
        if as_reference and x.ref_logp is None:
            x.ref_logp = part.clone()
        if x.old_logp is None:
            x.old_logp = part.clone()


def build_samples(
    tokenizer: Any,
    trajectories: Sequence[Trajectory],
    weights: dict[str, float] | None = None,
    settings: GRPOSettings | None = None,
) -> list[Sample]:
    """Samples for a step's trajectories: exact token sequences and A-Patch-scaled group advantages."""
    from .tokens import encode_episode

    settings = settings or GRPOSettings()
    weights = weights or {}
    advantages = group_advantages(
        [t.reward for t in trajectories],
        [t.group for t in trajectories],
        eps=settings.advantage_eps,
        normalize_std=settings.normalize_std,
    )
    samples = []
    for traj, adv in zip(trajectories, advantages):
        episode = encode_episode(tokenizer, traj.messages)
        # Position 0 has no context to be predicted from.
        positions = [i for i, m in enumerate(episode.loss_mask) if m and i > 0]
        input_ids = list(episode.input_ids)
        if settings.response_window_tokens is not None and positions:
            end = positions[0] + settings.response_window_tokens
            positions = [p for p in positions if p < end]
        cap = settings.max_tokens_per_micro_batch
        truncated = cap is not None and len(input_ids) > cap
        if truncated:  # the hard token cap: the episode's first `cap` tokens, their loss positions only
            input_ids = input_ids[:cap]
            positions = [p for p in positions if p < cap]
        samples.append(
            Sample(
                id=traj.id,
                group=traj.group,
                input_ids=input_ids,
                positions=positions,
                advantage=adv * float(weights.get(traj.id, 1.0)),
                engine_logprobs=[episode.engine_logprobs[i] for i in positions],
                truncated=truncated,
            )
        )
    return samples


def _importance(micro: Sequence[Sample], device: Any) -> torch.Tensor:
    """Per-token truncated importance weights of a micro-batch (1 for samples not corrected)."""
    from .staleness import importance_weights

    parts = [
        importance_weights(x.old_logp.to(device), x.engine_logprobs, x.importance_cap) if x.importance_cap
        else torch.ones(x.n_tokens, dtype=torch.float32, device=device)
        for x in micro
    ]
    return torch.cat(parts)


def _as_float(value: Any) -> float:
    """A scalar tensor as a float (a DTensor from a sharded model is made whole first)."""
    full = getattr(value, "full_tensor", None)
    return float(full() if callable(full) else value)


def _common_prefix(rows: Sequence[Sequence[int]]) -> int:
    first = rows[0]
    n = min(len(r) for r in rows)
    for i in range(n):
        t = first[i]
        if any(r[i] != t for r in rows[1:]):
            return i
    return n


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


def reference_policy(model: Any) -> Any:
    """The KL reference: a frozen copy of ``model`` as it is now; for a LoRA policy, the same model called
    with its adapters off (the base never trains, so that is exactly the initial policy, with no copy)."""
    from .lora import AdaptersOff, is_lora

    if is_lora(model):
        return AdaptersOff(model)
    ref = copy.deepcopy(model)
    ref.requires_grad_(False)
    ref.eval()
    return ref


class GRPOTrainer:
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
            raise ValueError("grpo.kl_coef > 0 needs a reference model (GRPOTrainer.with_reference builds one)")
        if s.old_logprobs == "engine" and temperature != 1.0:
            raise ValueError(
                "grpo.old_logprobs = engine needs rollout temperature 1: engines report log-probs at temperature 1, "
                f"the objective needs them at temperature {temperature}. Use old_logprobs: recompute."
            )
        self.ref_model = ref_model
        self.temperature = float(temperature)
        self.pad_id = int(pad_id)
        self.device = next(model.parameters()).device
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=s.lr, betas=tuple(s.betas), eps=s.adam_eps, weight_decay=s.weight_decay
        )
        self.updates = 0
        # True while the policy's weights equal the reference's (no update since it was copied): zero-advantage
        # trajectories then change nothing even with a KL term (see .skipping).
        self.policy_is_reference = bool(policy_is_reference and ref_model is not None)
        if s.gradient_checkpointing:
            enable_gradient_checkpointing(model, keep_attention=s.checkpoint_keep_attention)

    @classmethod
    def with_reference(cls, model: Any, settings: GRPOSettings | None = None, **kwargs: Any) -> GRPOTrainer:
        """A trainer whose KL reference is a frozen copy of ``model`` as it is now (when the KL term is on)."""
        settings = settings or GRPOSettings()
        ref = None
        if settings.kl_coef > 0:
            ref = reference_policy(model)
        # A frozen copy equals the policy until the first update; a LoRA policy's adapters-off reference is
        # not assumed equal (adapters need not start at zero), so nothing is skipped on that account.
        from .lora import is_lora

        at_reference = ref is not None and not is_lora(model)
        return cls(model, settings, ref_model=ref, policy_is_reference=at_reference, **kwargs)

    # --- forward passes ---------------------------------------------------------------------------------

    def _autocast(self) -> contextlib.AbstractContextManager:
        mode = self.settings.autocast
        dtype = next(self.model.parameters()).dtype
        if mode == "off" or (mode == "auto" and (self.device.type != "cuda" or dtype != torch.float32)):
            return contextlib.nullcontext()
        target = torch.float16 if mode == "float16" else torch.bfloat16
        return torch.autocast(device_type=self.device.type, dtype=target)

    def _logits(self, model: Any, batch: Sequence[Sample], hidden: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits predicting every loss token of ``batch`` (rows in sample order) and those tokens; with
        ``hidden``, the final hidden states there instead (the output layer is then applied in chunks)."""
        rows = [s.input_ids for s in batch]
        n, width = len(rows), max(len(r) for r in rows)
        shared = 0
        if self.settings.shared_prefix and n > 1 and not self.settings.gradient_checkpointing:
            first_loss = min(s.positions[0] for s in batch)
            # Every logit we need is at position >= first_loss - 1, so all of them fall in the suffix.
            shared = min(_common_prefix(rows), first_loss - 1)
            if shared < _MIN_SHARED_PREFIX:
                shared = 0
        suffix_len = width - shared
        ids = torch.full((n, suffix_len), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r) - shared] = torch.tensor(r[shared:], dtype=torch.long)
            mask[i, : len(r)] = 1
        keep = sorted({p - 1 - shared for s in batch for p in s.positions})
        column = {p: j for j, p in enumerate(keep)}
        row_idx = torch.tensor([i for i, s in enumerate(batch) for _ in s.positions], dtype=torch.long)
        col_idx = torch.tensor([column[p - 1 - shared] for s in batch for p in s.positions], dtype=torch.long)
        targets = torch.tensor([s.input_ids[p] for s in batch for p in s.positions], dtype=torch.long)
        dev = self.device
        keep_t = torch.tensor(keep, dtype=torch.long, device=dev)
        kwargs: dict[str, Any] = {}
        if shared:
            prefix = torch.tensor([rows[0][:shared]], dtype=torch.long, device=dev)
            cache = model(input_ids=prefix, use_cache=True, logits_to_keep=1).past_key_values
            cache.batch_repeat_interleave(n)
            positions = torch.arange(shared, width, device=dev).unsqueeze(0).expand(n, -1)
            kwargs = {"past_key_values": cache, "position_ids": positions, "use_cache": True}
        else:
            kwargs = {"use_cache": False}
        if hidden:
            out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), logits_to_keep=1,
                        output_hidden_states=True, **kwargs)
            cols = keep_t[col_idx.to(dev)]
            return out.hidden_states[-1][row_idx.to(dev), cols], targets.to(dev)
        out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), logits_to_keep=keep_t, **kwargs)
        logits = out.logits[row_idx.to(dev), col_idx.to(dev)]
        return logits, targets.to(dev)

    def _forward(self, model: Any, batch: Sequence[Sample], entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-token log-probs (and entropies) of ``batch``'s loss tokens, concatenated in sample order."""
        # A wrapper without its own output layer (the LoRA adapters-off reference) gets its logits whole.
        chunk = self.settings.logits_chunk_tokens if hasattr(model, "get_output_embeddings") else None
        if chunk:
            with self._autocast():
                states, targets = self._logits(model, batch, hidden=True)
                return chunked_logprobs(
                    states, model.get_output_embeddings(), targets, self.temperature, chunk=chunk,
                    entropy=entropy, entropy_grad=self.settings.entropy_coef > 0,
                )
        with self._autocast():
            logits, targets = self._logits(model, batch)
        logp = token_logprobs(logits, targets, self.temperature)
        ent = None
        if entropy:
            if self.settings.entropy_coef > 0:
                ent = entropy_from_logits(logits, self.temperature)
            else:
                with torch.no_grad():
                    ent = entropy_from_logits(logits.detach(), self.temperature)
        return logp, ent

    def _micro_batches(self, samples: Sequence[Sample]) -> list[list[Sample]]:
        s = self.settings
        out: list[list[Sample]] = []
        current: list[Sample] = []
        width = 0
        for sample in samples:
            w = max(width, len(sample.input_ids))
            too_many = len(current) >= s.micro_batch_size
            too_long = s.max_tokens_per_micro_batch is not None and current and w * (len(current) + 1) > s.max_tokens_per_micro_batch
            if current and (too_many or too_long):
                out.append(current)
                current, w = [], len(sample.input_ids)
            current.append(sample)
            width = w
        if current:
            out.append(current)
        return out

    @torch.no_grad()
    def fill_logprobs(self, model: Any, samples: Iterable[Sample], attr: str) -> None:
        """Set ``sample.<attr>`` (``old_logp`` or ``ref_logp``) with a no-grad pass of ``model``."""
        todo = [s for s in samples if getattr(s, attr) is None and s.n_tokens]
        for micro in self._micro_batches(todo):
            logp, _ = self._forward(model, micro, entropy=False)
            for sample, part in zip(micro, torch.split(logp, [s.n_tokens for s in micro])):
                setattr(sample, attr, part.detach())

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
        """One training step's update on ``samples``; returns metrics (means over the optimizer updates)."""
        started = time.perf_counter()
        was_training = self.model.training
        # Dropout stays off (eval mode) so the recomputed old log-probs equal the training pass's; gradient
        # checkpointing in transformers only engages in train mode.
        self.model.train(self.settings.gradient_checkpointing)
        batches = self.mini_batches(samples)
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
        weights = _weights_by_sample(batch, self.settings.loss_agg)
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
        _keep_policy_logprobs(micro, logp, as_reference=need_ref and at_reference)
        dev = logp.device
        old = torch.cat([x.old_logp.to(dev) for x in micro])
        adv = torch.tensor([x.advantage for x in micro for _ in x.positions], dtype=torch.float32, device=dev)
        if any(x.importance_cap for x in micro):
            adv = adv * _importance(micro, dev)
        w = torch.tensor([v for x in micro for v in weights[id(x)]], dtype=torch.float32, device=dev)
        ref = torch.cat([x.ref_logp.to(dev) for x in micro]) if need_ref else None
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
            tokens_per_s=tally.trained_tokens / elapsed if elapsed > 0 else 0.0,
            update_s=elapsed,
            lr=self._lr(),
            **tally.skips.metrics(),
        )
        if engine_diff is not None:
            metrics["engine_logprob_abs_diff"] = engine_diff
        return metrics

    # Hooks for a sharded trainer (distributed.ShardedGRPOTrainer): one process trains everything here.

    def _local(self, samples: Sequence[Sample]) -> list[Sample]:
        """The samples of a mini-batch that this process trains."""
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
        total, n = _engine_diff_sums(samples)
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

    def restored_updates(self, updates: int) -> None:
        """Set the update counter restored from a checkpoint; after any update the policy no longer equals
        its reference (the KL term and the zero-advantage skip rule must not assume it does)."""
        self.updates = updates
        self.policy_is_reference = self.policy_is_reference and updates == 0


class GRPORun:
    """What the grpo plugin keeps for one run: the policy, its trainer and the A-Patch state.

    The plugin's hooks delegate here; it lives in ``ctx.shared["grpo.run"]``.
    """

    def __init__(self, model: Any, tokenizer: Any, settings: GRPOSettings, apatch: Any, temperature: float = 1.0,
                 train: bool = True, policy: Any = None, seed: int = 0, ray: Any = None):
        self.model = model
        self.tokenizer = tokenizer
        self.settings = settings
        self.apatch = apatch
        self.temperature = temperature
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if train and settings.train_workers > 1:  # FSDP2 workers do the update; `model` is their synced copy
            from .distributed import GroupTrainer

            self.trainer = GroupTrainer(model, settings, policy, temperature=temperature, pad_id=pad or 0, seed=seed,
                                        ray=ray)
        else:
            self.trainer = (
                GRPOTrainer.with_reference(model, settings, temperature=temperature, pad_id=pad or 0) if train else None
            )

    def optimize(self, engine: Any, trajectories: Sequence[Trajectory], weights: dict[str, float],
                 rollout: Any = None, sleep_engines: bool = False) -> dict[str, float]:
        """Build samples, update the policy, push the new weights into ``engine``; return metrics.

        ``rollout`` (the recipe's ``rollout`` section) brings the staleness rule (see :mod:`.staleness`) and
        ``sleep_engines``: engines that share the trainer's GPUs sleep during the update (their ``sleep``)."""
        from . import staleness

        if self.trainer is None:
            raise RuntimeError("the grpo plugin was started without a trainer (stages.optimize is not grpo)")
        screened = None
        if rollout is not None:
            screened = staleness.screen(trajectories, self.trainer.updates, rollout.max_staleness, rollout.stale_samples)
            trajectories = screened.kept
        samples = build_samples(self.tokenizer, trajectories, weights, self.settings)
        if screened is not None and screened.corrected:
            if self.temperature != 1.0:
                raise ValueError("rollout.stale_samples = importance_correct needs sampling at temperature 1 "
                                 "(engines report log-probs at temperature 1); use refuse")
            for sample in samples:
                if sample.id in screened.corrected:
                    sample.importance_cap = rollout.importance_cap
        sleeper = getattr(engine, "sleep", None) if sleep_engines else None
        if callable(sleeper):
            sleeper()  # colocated engines give the GPU memory to the update; the weight push wakes them
        metrics = self.trainer.step(samples)
        if screened is not None:
            metrics.update(screened.metrics)
        metrics["truncated_sequences"] = float(sum(x.truncated for x in samples))
        advantages = [x.advantage for x in samples]
        if advantages:
            metrics["advantage_abs_mean"] = sum(abs(a) for a in advantages) / len(advantages)
            metrics["zero_advantage_frac"] = sum(1 for a in advantages if a == 0.0) / len(advantages)
        started = time.perf_counter()
        if metrics.get("updates", 1.0) > 0:  # unchanged weights (no update this step) need no push
            staleness.push_weights(engine, self.model, self.trainer.updates)
        metrics["weight_push_s"] = time.perf_counter() - started
        return metrics


def _engine_diff_sums(samples: Sequence[Sample]) -> tuple[float, int]:
    """Sum of |recomputed - engine| old log-probs and how many tokens have both."""
    total, n = 0.0, 0
    for x in samples:
        if x.old_logp is None:
            continue
        for lp, ours in zip(x.engine_logprobs, x.old_logp.tolist()):
            if lp is not None:
                total += abs(lp - ours)
                n += 1
    return total, n
