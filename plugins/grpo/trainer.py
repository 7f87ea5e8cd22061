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
from typing import Any, Iterable, Sequence

import torch

from seal_platform.types import Trajectory

from .objective import chunked_logprobs, entropy_from_logits, grpo_token_loss, token_logprobs, token_weights
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

    @property
    def n_tokens(self) -> int:
        return len(self.positions)


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
        samples.append(
            Sample(
                id=traj.id,
                group=traj.group,
                input_ids=list(episode.input_ids),
                positions=positions,
                advantage=adv * float(weights.get(traj.id, 1.0)),
                engine_logprobs=[episode.engine_logprobs[i] for i in positions],
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
            model.gradient_checkpointing_enable()

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
        s = self.settings
        started = time.perf_counter()
        was_training = self.model.training
        # Dropout stays off (eval mode) so the recomputed old log-probs equal the training pass's; gradient
        # checkpointing in transformers only engages in train mode.
        self.model.train(s.gradient_checkpointing)
        need_ref = s.kl_coef > 0
        want_entropy = True
        skips = SkipCounter()

        batches = self.mini_batches(samples)
        if s.old_logprobs == "engine":
            for sample in samples:
                if sample.n_tokens and all(lp is not None for lp in sample.engine_logprobs):
                    sample.old_logp = torch.tensor(sample.engine_logprobs, dtype=torch.float32, device=self.device)
        # Mini-batches after the first are trained on after an update: their old log-probs come first.
        self.fill_logprobs(self.model, self._local(predicted_runs(batches, s, self.policy_is_reference)), "old_logp")
        engine_diff = self._engine_diff(samples)

        totals: dict[str, float] = {k: 0.0 for k in ("loss", "pg_loss", "kl", "entropy", "grad_norm")}
        counts = {"tokens": 0, "clipped": 0, "dual": 0, "approx_kl": 0.0, "updates": 0, "skipped": 0, "ratio_max": 0.0}
        trained_tokens = 0
        trained_ids: set[int] = set()
        for _ in range(s.epochs_per_step):
            for batch in batches:
                weights = token_weights([x.n_tokens for x in batch], s.loss_agg)
                offsets, pos = {}, 0
                for x in batch:
                    offsets[id(x)] = pos
                    pos += x.n_tokens
                at_reference = self.policy_is_reference
                active = [x for x in batch if not can_skip(x, s, at_reference)]
                for x in batch:
                    if x.n_tokens and can_skip(x, s, at_reference):
                        skips.skip(x)
                if not active:
                    skips.mini_batches += 1
                    continue
                trained_ids.update(id(x) for x in active)
                active = self._local(active)
                self.optimizer.zero_grad(set_to_none=True)
                parts = {"loss": 0.0, "pg_loss": 0.0, "kl": 0.0, "entropy": 0.0}
                for micro in self._accumulation_batches(active):
                    if need_ref and not at_reference:
                        self.fill_logprobs(self.ref_model, micro, "ref_logp")
                    logp, ent = self._forward(self.model, micro, entropy=want_entropy)
                    if need_ref and at_reference:  # same weights: the reference's log-probs are these
                        for x, part in zip(micro, torch.split(logp.detach(), [x.n_tokens for x in micro])):
                            if x.ref_logp is None:
                                x.ref_logp = part.clone()
                    split = torch.split(logp.detach(), [x.n_tokens for x in micro])
                    for x, part in zip(micro, split):
                        if x.old_logp is None:  # first mini-batch: the policy has not moved yet
                            x.old_logp = part.clone()
                    dev = logp.device
                    old = torch.cat([x.old_logp.to(dev) for x in micro])
                    adv = torch.tensor([x.advantage for x in micro for _ in x.positions], dtype=torch.float32, device=dev)
                    if any(x.importance_cap for x in micro):
                        adv = adv * _importance(micro, dev)
                    w = torch.tensor(
                        [weights[offsets[id(x)] + j] for x in micro for j in range(x.n_tokens)],
                        dtype=torch.float32, device=dev,
                    )
                    ref = torch.cat([x.ref_logp.to(dev) for x in micro]) if need_ref else None
                    terms = grpo_token_loss(
                        logp, old, adv, w, ref_logp=ref, entropy=ent,
                        clip_low=s.clip_ratio_low, clip_high=s.clip_ratio_high, dual_clip=s.dual_clip,
                        kl_coef=s.kl_coef, kl_estimator=s.kl_estimator, entropy_coef=s.entropy_coef,
                    )
                    terms.loss.backward()
                    for key in parts:
                        parts[key] += float(getattr(terms, key).detach())
                    delta = (logp.detach() - old).float()
                    counts["tokens"] += int(logp.numel())
                    counts["clipped"] += int(terms.clipped.sum())
                    counts["dual"] += int(terms.dual_clipped.sum())
                    counts["approx_kl"] += float((0.5 * delta**2).sum())
                    counts["ratio_max"] = max(counts["ratio_max"], float(delta.max().exp()))
                    trained_tokens += sum(len(x.input_ids) for x in micro)
                params = [p for g in self.optimizer.param_groups for p in g["params"]]
                max_norm = s.grad_clip if s.grad_clip is not None else math.inf
                norm = _as_float(torch.nn.utils.clip_grad_norm_(params, max_norm))
                if math.isfinite(norm):
                    for group in self.optimizer.param_groups:
                        group["lr"] = self._lr()
                    self.optimizer.step()
                    self.updates += 1
                    self.policy_is_reference = False
                    counts["updates"] += 1
                else:  # a non-finite gradient would destroy the weights: skip this update
                    counts["skipped"] += 1
                self.optimizer.zero_grad(set_to_none=True)
                for key, value in parts.items():
                    totals[key] += value
                totals["grad_norm"] += norm if math.isfinite(norm) else 0.0
        self.model.train(was_training)
        totals, counts, trained_tokens = self._reduce_stats(totals, counts, trained_tokens)
        elapsed = time.perf_counter() - started
        n_updates = counts["updates"] + counts["skipped"]
        tokens = max(counts["tokens"], 1)
        metrics = {key: (value / n_updates if n_updates else 0.0) for key, value in totals.items()}
        metrics.update(
            clip_frac=counts["clipped"] / tokens,
            dual_clip_frac=counts["dual"] / tokens,
            approx_kl=counts["approx_kl"] / tokens,
            ratio_max=counts["ratio_max"],
            updates=float(counts["updates"]),
            skipped_updates=float(counts["skipped"]),
            trained_sequences=float(len(trained_ids)),
            generated_tokens=float(sum(x.n_tokens for x in samples)),
            trained_tokens=float(trained_tokens),
            tokens_per_s=trained_tokens / elapsed if elapsed > 0 else 0.0,
            update_s=elapsed,
            lr=self._lr(),
            **skips.metrics(),
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

    def _reduce_stats(self, totals: dict[str, float], counts: dict[str, Any], trained_tokens: int) -> tuple:
        """The step's loss parts and counts over all processes that trained it."""
        return totals, counts, trained_tokens

    def _engine_diff(self, samples: Sequence[Sample]) -> float | None:
        """Mean |recomputed - engine| old log-prob, where both exist (a trainer/engine mismatch check)."""
        if self.settings.old_logprobs != "recompute" or self.temperature != 1.0:
            return None
        total, n = _engine_diff_sums(samples)
        return total / n if n else None

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
