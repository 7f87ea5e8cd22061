"""The GRPO objective on flat per-token tensors (docs/seal-method.md, "Optimization").

Every function works on 1-D tensors holding the generated tokens of a batch of trajectories one after
another; ``token_weights`` turns the aggregation rule into one weight per token, so that a mini-batch split
into micro-batches (gradient accumulation) or with some trajectories skipped gives exactly the loss of the
whole mini-batch: ``loss = sum_t weight_t * loss_t``.

Per token t of trajectory i (A_i the trajectory's advantage, already scaled by A-Patch)::

    ratio  = exp(logp - old_logp)
    pg     = max(-A ratio, -A clip(ratio, 1 - eps_low, 1 + eps_high))         (PPO clip)
    pg     = min(pg, -A c)            if A < 0                                  (dual clip, c = 10)
    kl     = exp(ref - logp) - (ref - logp) - 1                                 (k3, to the initial policy)
    loss_t = pg + kl_coef kl - entropy_coef entropy

This is verl's ``compute_policy_loss`` / ``kl_penalty("low_var_kl")``, which the reference release runs.

The advantage A_i itself is :func:`step_advantages` (the group-normalised reward, with the ``grpo``
settings' ``advantage_eps`` and ``normalize_std``): the one definition, used by the trainer's samples and by
A-Patch's ``apply_to`` rule. torch is imported inside the functions that need it, so A-Patch (and the plugin
module, which imports it) can use the advantage without loading torch.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .settings import GRPOSettings

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from seal_platform.types import Trajectory

__all__ = [
    "group_advantages",
    "step_advantages",
    "token_logprobs",
    "entropy_from_logits",
    "chunked_logprobs",
    "kl_penalty",
    "policy_loss",
    "token_weights",
    "LossTerms",
    "grpo_token_loss",
]


def group_advantages(
    rewards: Sequence[float], groups: Sequence[str], eps: float = 1e-6, normalize_std: bool = True
) -> list[float]:
    """GRPO advantages: each reward normalised within its group.

    ``A_j = (R_j - mean R) / (std R + eps)`` with the unbiased std over the group. A group of one has no
    baseline and no std; like verl it gets mean 0 and std 1 (so ``A = R``).
    """
    if len(rewards) != len(groups):
        raise ValueError(f"{len(rewards)} rewards but {len(groups)} group ids")
    members: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    out = [0.0] * len(rewards)
    for idx in members.values():
        values = [float(rewards[i]) for i in idx]
        if len(values) == 1:
            mean, std = 0.0, 1.0
        else:
            mean = sum(values) / len(values)
            std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        for i, v in zip(idx, values):
            out[i] = (v - mean) / (std + eps) if normalize_std else v - mean
    return out


def step_advantages(trajectories: Sequence[Trajectory], settings: GRPOSettings) -> list[float]:
    """The advantage of each of a step's trajectories: :func:`group_advantages` of their rewards within their
    groups, with ``settings``' ``advantage_eps`` and ``normalize_std``."""
    return group_advantages(
        [t.reward for t in trajectories],
        [t.group for t in trajectories],
        eps=settings.advantage_eps,
        normalize_std=settings.normalize_std,
    )


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log p(target) under ``softmax(logits / temperature)``; computed in float32.

    Uses ``gather - logsumexp`` rather than a full ``log_softmax`` so no second vocabulary-sized tensor is
    kept for backward.
    """
    import torch

    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of ``softmax(logits / temperature)`` per row."""
    import torch

    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def _chunk_stats(hidden: torch.Tensor, head: Any, targets: torch.Tensor, temperature: float, entropy: bool
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    logits = head(hidden)
    logp = token_logprobs(logits, targets, temperature)
    ent = entropy_from_logits(logits, temperature) if entropy else logp.new_zeros(logp.shape)
    return logp, ent


def chunked_logprobs(
    hidden: torch.Tensor,
    head: Any,
    targets: torch.Tensor,
    temperature: float = 1.0,
    *,
    chunk: int = 1024,
    entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs (and entropies) of ``targets`` from final hidden states, ``chunk`` rows at a time.

    ``head`` is the model's output layer (``model.get_output_embeddings()``). Only one chunk's
    vocabulary-sized float32 logits exist at any moment: with gradients on, each chunk runs under
    ``torch.utils.checkpoint``, so backward recomputes its logits instead of keeping them (memory
    ``O(chunk x vocab)`` instead of ``O(tokens x vocab)``, for one extra output-layer matmul). The entropy
    carries gradient only when ``entropy_grad``; otherwise it is returned detached (a metric).
    """
    import torch
    from torch.utils.checkpoint import checkpoint

    grad = torch.is_grad_enabled() and (hidden.requires_grad or any(p.requires_grad for p in head.parameters()))
    logps, ents = [], []
    for start in range(0, hidden.shape[0], max(1, int(chunk))):
        h, t = hidden[start : start + chunk], targets[start : start + chunk]
        if grad:
            lp, ent = checkpoint(_chunk_stats, h, head, t, temperature, entropy, use_reentrant=False)
        else:
            lp, ent = _chunk_stats(h, head, t, temperature, entropy)
        logps.append(lp)
        ents.append(ent if entropy_grad else ent.detach())
    if not logps:
        empty = hidden.new_zeros((0,), dtype=torch.float32)
        return empty, (empty if entropy else None)
    return torch.cat(logps), (torch.cat(ents) if entropy else None)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from log-probs of the sampled tokens.

    k1: ``logp - ref``; k2: ``(logp - ref)^2 / 2``; k3: ``exp(ref - logp) - (ref - logp) - 1``, clamped to
    [-10, 10] as verl does (non-negative, low variance).
    """
    import torch

    if estimator == "k1":
        return logp - ref_logp
    if estimator == "k2":
        return 0.5 * (logp - ref_logp) ** 2
    if estimator == "k3":
        delta = torch.clamp(ref_logp - logp, min=-20.0, max=20.0)
        return torch.clamp(torch.exp(delta) - delta - 1.0, min=-10.0, max=10.0)
    raise ValueError(f"unknown KL estimator {estimator!r}: use k1, k2 or k3")


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = 10.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token clipped surrogate loss, the mask of tokens where the PPO clip is active, and the mask of
    tokens where the dual clip is active."""
    import torch

    log_ratio = torch.clamp(logp - old_logp, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(loss_unclipped, loss_clipped)
    clipped = loss_clipped > loss_unclipped
    if dual_clip is None:
        return loss, clipped, torch.zeros_like(clipped)
    bound = -advantages * dual_clip
    negative = advantages < 0
    dual = negative & (loss > bound)
    loss = torch.where(negative, torch.minimum(loss, bound), loss)
    return loss, clipped, dual


def token_weights(lengths: Sequence[int], mode: str = "seq-mean-token-mean") -> list[float]:
    """The aggregation rule as a weight per token (all trajectories of one mini-batch, in order).

    ``seq-mean-token-mean``: 1 / (n_trajectories * T_i) for each token of trajectory i (token mean per
    trajectory, then mean over trajectories; a trajectory without generated tokens counts in n but adds no
    term). ``token-mean``: 1 / sum_i T_i.
    """
    if mode == "seq-mean-token-mean":
        n = len(lengths)
        return [w for t in lengths for w in ([1.0 / (n * t)] * t if t else [])]
    if mode == "token-mean":
        total = sum(lengths)
        return [1.0 / total] * total if total else []
    raise ValueError(f"unknown loss aggregation {mode!r}: use seq-mean-token-mean or token-mean")


@dataclass
class LossTerms:
    """A micro-batch's weighted loss and its parts (weighted the same way), for backward and metrics."""

    loss: torch.Tensor
    pg_loss: torch.Tensor
    kl: torch.Tensor
    entropy: torch.Tensor
    clipped: torch.Tensor
    dual_clipped: torch.Tensor


def grpo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    *,
    ref_logp: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = 10.0,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
    entropy_coef: float = 0.0,
) -> LossTerms:
    """The weighted GRPO loss ``sum_t w_t (pg_t + kl_coef kl_t - entropy_coef H_t)`` of some tokens.

    ``advantages`` is per token (each trajectory's advantage broadcast to its tokens); ``weights`` from
    :func:`token_weights`. ``ref_logp`` is needed when ``kl_coef > 0``, ``entropy`` when
    ``entropy_coef > 0`` (entropy carries gradient then).
    """
    pg, clipped, dual = policy_loss(logp, old_logp, advantages, clip_low, clip_high, dual_clip)
    per_token = pg
    pg_loss = (weights * pg).sum()
    kl_value = logp.new_zeros(())
    if ref_logp is not None:
        kl = kl_penalty(logp, ref_logp, kl_estimator)
        kl_value = (weights * kl).sum()
        if kl_coef:
            per_token = per_token + kl_coef * kl
    elif kl_coef:
        raise ValueError("kl_coef > 0 needs the reference policy's log-probs")
    ent_value = logp.new_zeros(())
    if entropy is not None:
        ent_value = (weights * entropy).sum()
        if entropy_coef:
            per_token = per_token - entropy_coef * entropy
    elif entropy_coef:
        raise ValueError("entropy_coef > 0 needs the entropy of the policy")
    return LossTerms(
        loss=(weights * per_token).sum(),
        pg_loss=pg_loss,
        kl=kl_value,
        entropy=ent_value,
        clipped=clipped,
        dual_clipped=dual,
    )
