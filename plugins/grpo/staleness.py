"""Policy versions and stale samples.

Every :class:`~seal_platform.types.Generation` carries the policy version its engine sampled it with (the
trainer's optimizer-update count at the last weight push, :attr:`GRPOTrainer.updates`); the episode copies it
onto the assistant message, and a trajectory's version is its oldest message's. At the start of an update the
trainer's version is ``trainer.updates``; a trajectory ``updates - version`` behind is *stale* when that exceeds
``grpo.max_staleness``. Stale trajectories are, by ``grpo.stale_samples``:

* ``refuse`` (default): dropped from the update (the group's advantage is computed over the rest);
* ``importance_correct``: kept, each generated token's advantage scaled by the truncated importance weight
  ``min(cap, p_old(token) / p_sampled(token))`` (p_old: the trainer's pre-update policy, p_sampled: the
  engine's log-prob at sampling time), which corrects the sampling distribution to the one PPO's ratio
  starts from (truncated importance sampling, as in verl / "Your efficient RL framework secretly brings you
  off-policy RL training").

A trajectory with no version (an engine that does not track versions) counts as current.

With overlapped rollouts (the core's ``rollout.overlap``), a step's trajectories were sampled while the step
before it trained, with the weights from before that step's update: they are as many versions old as that
step made optimizer updates (:func:`updates_per_step`), and :func:`overlap_issues` refuses a recipe whose rule
would drop them all. The optimizer waits for them (``rollouts.wait``) before it changes the engine's weights,
so every trajectory's tokens come from one version.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from seal_platform.config import Issue
from seal_platform.engine import TrainableEngine
from seal_platform.types import Trajectory


@dataclass
class Screened:
    kept: list[Trajectory]
    corrected: set[str] = field(default_factory=set)  # ids to importance-correct
    metrics: dict[str, float] = field(default_factory=dict)


def staleness(trajectory: Trajectory, current: int) -> int:
    version = trajectory.policy_version
    return 0 if version is None else max(0, current - version)


def screen(trajectories: Sequence[Trajectory], current: int, max_staleness: int, mode: str) -> Screened:
    """Apply the staleness rule to a step's trajectories (see the module doc)."""
    ages = [staleness(t, current) for t in trajectories]
    stale = [t for t, age in zip(trajectories, ages) if age > max_staleness]
    n = max(len(trajectories), 1)
    metrics = {"policy_staleness_max": float(max(ages, default=0)), "stale_frac": len(stale) / n}
    if mode == "refuse":
        ids = {t.id for t in stale}
        metrics["stale_refused_frac"] = len(stale) / n
        return Screened([t for t in trajectories if t.id not in ids], set(), metrics)
    if mode == "importance_correct":
        metrics["stale_corrected_frac"] = len(stale) / n
        return Screened(list(trajectories), {t.id for t in stale}, metrics)
    raise ValueError(f"unknown settings.grpo.stale_samples {mode!r}: use refuse or importance_correct")


def importance_weights(old_logp, engine_logp: Sequence[float | None], cap: float):
    """Per-token ``min(cap, exp(old - sampled))``; 1 where the engine reported no log-prob."""
    import torch

    sampled = torch.tensor([float("nan") if x is None else x for x in engine_logp], dtype=torch.float32,
                           device=old_logp.device)
    weight = torch.exp(torch.clamp(old_logp.float() - sampled, max=20.0)).clamp(max=cap)
    return torch.where(torch.isnan(sampled), torch.ones_like(weight), weight)


def push_weights(engine: object, model: object, version: int) -> bool:
    """``engine.update_weights(model, version=version)``; False when the engine is no
    :class:`~seal_platform.engine.TrainableEngine` (it takes no weights)."""
    if not isinstance(engine, TrainableEngine):
        return False
    engine.update_weights(model, version=version)
    return True


def updates_per_step(config: Any, settings: Any) -> int:
    """The most optimizer updates one training step makes: ``epochs_per_step`` passes over mini-batches of
    ``mini_batch_tasks`` of the step's ``training.tasks_per_step`` groups."""
    tasks = config.training.tasks_per_step
    return math.ceil(tasks / max(1, min(settings.mini_batch_tasks, tasks))) * settings.epochs_per_step


def overlap_issues(config: Any, settings: Any, engine: Any, ray: bool) -> list[Issue]:
    """What keeps grpo from training on overlapped rollouts (``rollout.overlap``) with this recipe."""
    issues = []
    lag = updates_per_step(config, settings)
    if settings.stale_samples == "refuse" and settings.max_staleness < lag:
        issues.append(Issue(
            "settings.grpo.max_staleness",
            f"with rollout.overlap a step trains on rollouts sampled before the previous step's {lag} optimizer "
            f"update(s), which settings.grpo.max_staleness {settings.max_staleness} refuses: every overlapped step "
            "would train on nothing",
            f"set settings.grpo.max_staleness: {lag} (or more), or settings.grpo.stale_samples: importance_correct, "
            "or rollout.overlap: false"))
    # (local replica processes, engine.replicas, hold copies of their own)
    if config.rollout.engine == "hf" and not ray and engine.hf.share_model and engine.replicas is None:
        issues.append(Issue(
            "settings.engine.hf.share_model",
            "with rollout.overlap the hf engine must not generate with the trainer's own model object: the update "
            "would change it while the next step's episodes sample from it (so grpo would wait for them and "
            "nothing would overlap)",
            "set settings.engine.hf.share_model: false (the engine keeps a copy and receives the new weights "
            "between rollout batches), or rollout.overlap: false"))
    if ray and settings.placement.colocate:
        issues.append(Issue(
            "settings.grpo.placement.colocate",
            "with rollout.overlap the engines keep sampling while the trainer updates, so they cannot sleep on "
            "the trainer's GPUs",
            "give engines GPUs of their own (settings.grpo.placement.colocate: false), or rollout.overlap: false"))
    return issues
