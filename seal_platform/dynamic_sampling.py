"""Dynamic sampling: a step trains only on groups with mixed outcomes, and draws more tasks until it has them.

A GRPO group whose rollouts all got the same reward has advantage 0 everywhere: it teaches nothing, yet a
step made of such groups costs a full update (or, with ``grpo.zero_advantage: skip``, trains on nothing).
DAPO's dynamic sampling (verl's ``algorithm.filter_groups``) keeps collecting until the batch holds the
requested number of groups whose rewards differ, and filters the rest out. Here (``rollout.dynamic_sampling``):

* each round collects ``tasks_per_round`` tasks (default ``training.tasks_per_step``; verl's
  ``gen_batch_size``): round 1 is the step's scheduled batch, topped up with drawn tasks when
  ``tasks_per_round`` is larger, so a step usually finds its mixed groups in one round;
* while fewer than ``tasks_per_step`` groups are *mixed* (not every reward equal) and fewer than
  ``max_rounds`` rounds ran, another round is drawn and collected; the draw order is a seeded shuffle of the
  tasks not in the step's batch (``seed``, ``step``), so a resumed run draws the same tasks;
* the first ``tasks_per_step`` mixed groups (in draw order) are trained on; uniform groups, and mixed groups
  beyond the quota, are stored and diagnosed like every rollout but are kept out of ``reweight`` and
  ``optimize``;
* the step's metrics count it: ``ds_rounds``, ``ds_groups_drawn``, ``ds_groups_kept``, ``ds_groups_uniform``
  (dropped: all rewards equal) and ``ds_groups_surplus`` (dropped: mixed, beyond the quota).

Groups lost to the infrastructure (see :mod:`seal_platform.infra`) are neither kept nor counted as uniform.
The filter works on any environment: it reads only trajectories' ``group`` and ``reward``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .registry import MetricSpec
from .types import Task, Trajectory

#: The step-metric names this module writes (read by ``show``, the summary and the report).
METRICS = ("ds_rounds", "ds_groups_drawn", "ds_groups_kept", "ds_groups_uniform", "ds_groups_surplus")
ROUNDS, DRAWN, KEPT, UNIFORM, SURPLUS = METRICS

#: How they are shown: the core's own declarations, read before every plugin's ``register_metrics``.
METRIC_SPECS = (
    MetricSpec(ROUNDS, "collect rounds the step ran to find its mixed groups", label="rounds", format=".0f"),
    MetricSpec(DRAWN, "groups collected", label="drawn", format=".0f"),
    MetricSpec(KEPT, "groups trained on (rewards differ)", label="kept (mixed)", format=".0f",
               skip_reason="no group with mixed outcomes was drawn", skipped=lambda m: m[KEPT] == 0),
    MetricSpec(UNIFORM, "groups dropped: all rewards equal", label="dropped (all equal)", format=".0f"),
    MetricSpec(SURPLUS, "groups dropped: mixed, beyond the step's quota", label="dropped (beyond quota)", format=".0f"),
)


def draw_order(train_tasks: list[Task], batch: list[Task], seed: int, step: int) -> list[Task]:
    """The tasks a step may draw after its batch: every training task not in the batch, in a shuffle seeded
    by the run's seed and the step (the same on a resume)."""
    scheduled = {t.id for t in batch}
    pool = [t for t in train_tasks if t.id not in scheduled]
    random.Random(f"{seed}:dynamic-sampling:{step}").shuffle(pool)
    return pool


def groups_of(trajectories: list[Trajectory]) -> dict[str, list[Trajectory]]:
    """Trajectories by group, groups in order of first appearance."""
    out: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        out.setdefault(t.group, []).append(t)
    return out


def is_mixed(group: list[Trajectory]) -> bool:
    """Whether the group's rewards differ (so GRPO's advantages are not all zero)."""
    return len({t.reward for t in group}) > 1


def count_mixed(trajectories: list[Trajectory]) -> int:
    return sum(is_mixed(g) for g in groups_of(trajectories).values())


def separate_groups(existing: list[Trajectory], new: list[Trajectory], round_no: int) -> list[Trajectory]:
    """``new`` with group names that do not collide with ``existing``'s: an environment may name groups by
    position in the batch, and a later round's groups are other tasks."""
    taken = {t.group for t in existing}
    if not any(t.group in taken for t in new):
        return new
    return [t.model_copy(update={"group": f"{t.group}#r{round_no}"}) for t in new]


@dataclass
class Selection:
    """What a step trains on after filtering, and the counts stored with the step."""

    kept: list[Trajectory] = field(default_factory=list)
    rounds: int = 1
    drawn: int = 0
    uniform: int = 0
    surplus: int = 0

    @property
    def kept_groups(self) -> int:
        return len(groups_of(self.kept))

    def metrics(self) -> dict[str, float]:
        return {ROUNDS: float(self.rounds), DRAWN: float(self.drawn), KEPT: float(self.kept_groups),
                UNIFORM: float(self.uniform), SURPLUS: float(self.surplus)}


def select(trainable: list[Trajectory], wanted: int, rounds: int, drawn: int, keep_surplus: bool = False) -> Selection:
    """Keep the first ``wanted`` mixed groups of ``trainable`` (whole groups, in order); with ``keep_surplus``
    every mixed group."""
    selection = Selection(rounds=rounds, drawn=drawn)
    kept = 0
    for group in groups_of(trainable).values():
        if not is_mixed(group):
            selection.uniform += 1
        elif kept < wanted or keep_surplus:
            selection.kept.extend(group)
            kept += 1
        else:
            selection.surplus += 1
    return selection
