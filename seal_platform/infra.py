"""Infrastructure failures are not policy failures.

A dead actor, a lost node, an engine replica gone mid-generation or an episode past its wall-clock limit
says nothing about the policy. Such an episode becomes a trajectory marked ``infra_failure`` (with the
reason) instead of a failed rollout, and the run loop then:

* keeps it out of diagnosis, the capability state and interface evolution (no label is ever learned from it);
* masks its whole GRPO group out of the update: a fake zero reward would bias the group's baseline, and a
  group missing a member is no longer the sample the advantage normalisation assumes;
* reports the masked share as the step metric ``infra_masked_frac`` and stores an ``infra_failure`` event;
* aborts the step only when the masked share is above ``rollout.max_infra_failure_frac``.

Executors turn a lost unit of work into such a trajectory through the ``on_infra_failure`` callback of
:meth:`seal_platform.executor.Executor.map`; code inside an episode that detects a failure of the
infrastructure (no engine replica left, say) raises :class:`InfraError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import SealError
from .types import Task, Trajectory

INFRA_FINISH = "infra_failure"


class InfraError(RuntimeError):
    """The infrastructure, not the policy, failed an episode (raise it from inside an episode)."""


class InfraAbort(SealError):
    """Too large a share of a step was lost to infrastructure failures to train on it."""


def failed_trajectory(task: Task, group: str, sample: int, reason: str, interface_revision: int = 0) -> Trajectory:
    """The placeholder trajectory of an episode lost to the infrastructure."""
    return Trajectory(
        task_id=task.id, category=task.category, group=group, sample=sample,
        interface_revision=interface_revision, finish=INFRA_FINISH, infra_failure=reason or "unknown",
    )


@dataclass
class Triage:
    """A step's trajectories sorted by what they may be used for."""

    all: list[Trajectory]
    # Episodes that ran to their end (diagnosis, capability state, evolution): every non-failed one.
    usable: list[Trajectory] = field(default_factory=list)
    # Trajectories whose whole group survived (reweight, optimize).
    trainable: list[Trajectory] = field(default_factory=list)
    failed: list[Trajectory] = field(default_factory=list)
    masked_groups: list[str] = field(default_factory=list)

    @property
    def masked_frac(self) -> float:
        """Share of the step's trajectories kept out of the update."""
        return 1.0 - len(self.trainable) / len(self.all) if self.all else 0.0

    def summary(self) -> str:
        reasons: dict[str, int] = {}
        for t in self.failed:
            reasons[t.infra_failure or "unknown"] = reasons.get(t.infra_failure or "unknown", 0) + 1
        listed = "; ".join(f"{n} x {r}" for r, n in sorted(reasons.items()))
        return (f"{len(self.failed)} of {len(self.all)} episode(s) lost to infrastructure failures ({listed}); "
                f"{len(self.masked_groups)} group(s) masked out of the update ({self.masked_frac:.0%} of the step)")


def mean_reward(trajectories: list[Trajectory]) -> float:
    """The step's mean reward over the episodes that ran to their end: an episode lost to the infrastructure
    has no verdict, and counting it as reward 0 would report an infrastructure fault as a policy failure."""
    rewards = [t.reward for t in trajectories if not t.infra_failure]
    return sum(rewards) / len(rewards) if rewards else 0.0


def triage(trajectories: list[Trajectory]) -> Triage:
    """Split a step's trajectories into usable, trainable and failed ones (see the module doc)."""
    result = Triage(all=list(trajectories))
    bad_groups = {t.group for t in trajectories if t.infra_failure}
    result.masked_groups = sorted(bad_groups)
    for t in trajectories:
        if t.infra_failure:
            result.failed.append(t)
            continue
        result.usable.append(t)
        if t.group not in bad_groups:
            result.trainable.append(t)
    return result


def check(result: Triage, max_frac: float, step: int) -> None:
    """Raise :class:`InfraAbort` when more of the step is masked than ``max_frac`` allows."""
    if result.failed and result.masked_frac > max_frac:
        raise InfraAbort(
            f"step {step} aborted: {result.summary()}, above rollout.max_infra_failure_frac = {max_frac}. "
            "Check the cluster (dead actors, lost nodes, episode time limits) or raise the threshold."
        )
