"""What the GRPO trainer trains on: :class:`Sample` s built from a step's trajectories, and what a step adds up.

A step's trajectories become samples (their exact token sequences from
:func:`~seal_platform_libs.policy.tokens.encode_episode`, the positions of the tokens the model generated,
and their advantage: the group-normalised reward of :func:`~.objective.step_advantages` times the A-Patch
weight). The helpers here are the per-sample pieces of a step that the single-process trainer
(:mod:`.trainer`) and the sharded one (:mod:`.sharded`) share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from seal_platform.types import Trajectory

from .objective import LossTerms, step_advantages, token_weights
from .settings import GRPOSettings
from .skipping import SkipCounter


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

    SUMMED: ClassVar[tuple[str, ...]] = (*LOSS_PARTS, "tokens", "clipped", "dual", "approx_kl", "trained_tokens",
                                         "own_pass_ratio_samples")
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
    # Samples trained after an update of this step with their old log-probs taken from their own training pass
    # (ratio exactly 1, never clipped): a wrong update. 0 unless old log-probs are missing where they train.
    own_pass_ratio_samples: int = 0
    trained_ids: set[int] = field(default_factory=set)
    skips: SkipCounter = field(default_factory=SkipCounter)

    def count_micro_batch(
        self, terms: LossTerms, logp: torch.Tensor, old: torch.Tensor, micro: Sequence[Sample]
    ) -> None:
        delta = (logp - old).float()
        self.tokens += int(logp.numel())
        self.clipped += int(terms.clipped.sum())
        self.dual += int(terms.dual_clipped.sum())
        self.approx_kl += float((0.5 * delta**2).sum())
        self.ratio_max = max(self.ratio_max, float(delta.max().exp()))
        self.trained_tokens += sum(len(x.input_ids) for x in micro)


def weights_by_sample(batch: Sequence[Sample], loss_agg: str) -> dict[int, list[float]]:
    """Each sample's (by ``id``) per-token aggregation weights, computed over the whole mini-batch."""
    weights = token_weights([x.n_tokens for x in batch], loss_agg)
    out, pos = {}, 0
    for x in batch:
        out[id(x)] = [weights[pos + j] for j in range(x.n_tokens)]
        pos += x.n_tokens
    return out


def filled(logp: torch.Tensor | None) -> torch.Tensor:
    """A sample's ``old_logp`` or ``ref_logp``, which :func:`keep_policy_logprobs` fills in before any use."""
    if logp is None:
        raise ValueError("a sample's log-probs were used before keep_policy_logprobs filled them in")
    return logp


def keep_policy_logprobs(micro: Sequence[Sample], logp: torch.Tensor, as_reference: bool) -> int:
    """Take the training pass's log-probs as old log-probs where none were computed (the first mini-batch:
    the policy has not moved yet) and, ``as_reference`` (the policy still equals the reference), as
    reference log-probs. Returns how many samples took their old log-probs so."""
    parts = torch.split(logp.detach(), [x.n_tokens for x in micro])
    taken = 0
    for x, part in zip(micro, parts):
        if as_reference and x.ref_logp is None:
            x.ref_logp = part.clone()
        if x.old_logp is None:
            x.old_logp = part.clone()
            taken += 1
    return taken


def overlong(trajectory: Trajectory) -> bool:
    """Cut off by a token limit: a generation the engine stopped at its ``max_new_tokens``, or an episode
    ended at the context limit (what ``grpo.overlong_filter`` masks from the loss)."""
    return trajectory.finish == "context_limit" or any(m.cut_off for m in trajectory.messages if m.trainable)


def build_samples(
    tokenizer: Any,
    trajectories: Sequence[Trajectory],
    weights: dict[str, float] | None = None,
    settings: GRPOSettings | None = None,
) -> list[Sample]:
    """Samples for a step's trajectories: exact token sequences and A-Patch-scaled group advantages. With
    ``grpo.overlong_filter`` the :func:`overlong` ones get no sample (after their rewards counted in their
    groups' advantages)."""
    from seal_platform_libs.policy.tokens import encode_episode

    settings = settings or GRPOSettings()
    weights = weights or {}
    advantages = step_advantages(trajectories, settings)
    samples = []
    for traj, adv in zip(trajectories, advantages):
        if settings.overlong_filter and overlong(traj):
            continue
        episode = encode_episode(tokenizer, traj.messages)
        # Position 0 has no context to be predicted from.
        positions = [i for i, m in enumerate(episode.loss_mask) if m and i > 0]
        input_ids = list(episode.input_ids)
        if settings.response_window_tokens is not None and positions:
            end = positions[0] + settings.response_window_tokens
            positions = [p for p in positions if p < end]
        cap = settings.max_tokens_per_micro_batch
        truncated = cap is not None and len(input_ids) > cap
        if truncated and cap is not None:  # the hard token cap: the first `cap` tokens, their loss positions only
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


def token_importance(micro: Sequence[Sample], device: Any) -> torch.Tensor:
    """Per-token truncated importance weights of a micro-batch (1 for samples not corrected)."""
    from .staleness import importance_weights

    parts = [
        importance_weights(filled(x.old_logp).to(device), x.engine_logprobs, x.importance_cap) if x.importance_cap
        else torch.ones(x.n_tokens, dtype=torch.float32, device=device)
        for x in micro
    ]
    return torch.cat(parts)


def engine_diff_sums(samples: Sequence[Sample]) -> tuple[float, int]:
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
